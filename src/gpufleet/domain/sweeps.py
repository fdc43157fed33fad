"""Sweeps (docs/jobs.md, Sweeps): one job a point of a grid of parameters, decided here.

A sweep names its parameters and their values (`{"lr": [1e-4, 3e-4], "batch": [16, 32]}`);
its points are the grid's (every combination, the last parameter changing fastest) or, with
`sweep_samples`, that many of them drawn at random without repeats. Each point's job runs the
submitted config with `{name}` placeholders replaced by the point's values (in the command,
the env values and every other string of the config; `{{name}}` stays a literal `{name}`),
and the point as JSON in `GPUFLEET_SWEEP_PARAMS`. Everything here is checked before anything
is stored: a placeholder that names no parameter, a parameter no placeholder uses, an empty
list, a value that is not a scalar, a bad name, too many points.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain.states import PLACED_JOB, WAITING_JOB, JobStatus
from gpufleet.errors import InvalidInput

MAX_POINTS = 1000  # the jobs one sweep makes, at most
MAX_SAMPLED_GRID = 1_000_000  # the grid `sweep_samples` may draw from, at most
MAX_PARAMS = 16
MAX_VALUE_CHARS = 1024
MAX_PARALLEL = MAX_POINTS
MAX_SWEEP_BYTES = 32_000_000  # the configs of all its jobs together, as JSON
PARAMS_ENV = "GPUFLEET_SWEEP_PARAMS"
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# `{{name}}`: a literal `{name}`; `{name}`: a placeholder. Other braces are left alone.
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")

Scalar = str | int | float | bool
Point = dict[str, Scalar]


@dataclass(frozen=True, slots=True)
class Sweep:
    """A stored sweep: its parameters, how its points were chosen, who made it."""

    id: str
    params: dict[str, list[Scalar]]  # name -> its values, in the order given
    samples: int | None  # drawn at random: how many; None: the whole grid
    max_parallel: int | None  # its jobs on workers at once, at most; None: no limit
    size: int  # the points (jobs) it made
    user_id: str | None
    team_id: str | None
    submitted_by: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Grid:
    """The parameters, in the order given, and each one's values."""

    names: tuple[str, ...]
    values: tuple[tuple[Scalar, ...], ...]

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.values)

    def point(self, index: int) -> Point:
        """The grid's `index`th point (0 first; the last parameter changes fastest)."""
        out: list[tuple[str, Scalar]] = []
        for name, values in zip(reversed(self.names), reversed(self.values), strict=True):
            index, at = divmod(index, len(values))
            out.append((name, values[at]))
        return dict(reversed(out))

    def index_of(self, point: Mapping[str, Any]) -> int:
        """The point's place in the grid (`point`'s inverse); past the end when it is none
        of its points (the order a sweep's jobs are shown in)."""
        index = 0
        for name, values in zip(self.names, self.values, strict=True):
            said = [json.dumps(v) for v in values]
            value = json.dumps(point.get(name))
            if value not in said:
                return self.size
            index = index * len(values) + said.index(value)
        return index

    @classmethod
    def of(cls, params: Mapping[str, Sequence[Scalar]]) -> Grid:
        """A stored sweep's grid (checked when it was made)."""
        return cls(tuple(params), tuple(tuple(v) for v in params.values()))

    def as_json(self) -> dict[str, list[Scalar]]:
        return {n: list(v) for n, v in zip(self.names, self.values, strict=True)}


def _scalar(name: str, at: int, value: Any) -> Scalar:
    where = f"sweep value {name}[{at}]"
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{where} is {value!r}: give a finite number")
        return value
    if not isinstance(value, str):
        raise InvalidInput(
            f"{where} is a {type(value).__name__}: a sweep's values are strings, numbers or "
            "booleans"
        )
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidInput(f"{where} is over {MAX_VALUE_CHARS} characters: give a shorter one")
    if "\x00" in value:
        raise InvalidInput(f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{where} is not valid text (a lone surrogate)") from None
    return value


def _name(name: Any) -> str:
    if not isinstance(name, str) or not PARAM_NAME.fullmatch(name):
        shown = name[:70] if isinstance(name, str) else name
        raise InvalidInput(
            f"sweep parameter {shown!r} is not a name: use letters, digits and '_' (at most "
            "64, not starting with a digit), as its {placeholder} does"
        )
    return name


def check_grid(sweep: Any, samples: int | None = None) -> Grid:
    """The sweep's parameters as a grid, refused unless each is a name with a list of
    distinct scalars, and unless its points are at most `MAX_POINTS` (drawn with `samples`:
    at most `MAX_SAMPLED_GRID` to draw from)."""
    if not isinstance(sweep, Mapping) or not sweep:
        raise InvalidInput(
            'a sweep is an object of parameters and their values, e.g. {"lr": [0.0001, 0.001]}'
        )
    if len(sweep) > MAX_PARAMS:
        raise InvalidInput(f"a sweep has {len(sweep)} parameters; at most {MAX_PARAMS}")
    names, lists = [], []
    for raw, values in sweep.items():
        name = _name(raw)
        if not isinstance(values, list) or not values:
            raise InvalidInput(
                f"sweep parameter {name!r} must be a non-empty list of values, e.g. "
                f'"{name}": [1, 2]'
            )
        if len(values) > MAX_POINTS:
            raise InvalidInput(
                f"sweep parameter {name!r} has {len(values)} values; at most {MAX_POINTS}"
            )
        checked = [_scalar(name, at, v) for at, v in enumerate(values)]
        seen = {json.dumps(v) for v in checked}
        if len(seen) < len(checked):
            raise InvalidInput(f"sweep parameter {name!r} lists a value twice: list each once")
        names.append(name)
        lists.append(tuple(checked))
    grid = Grid(tuple(names), tuple(lists))
    most = MAX_SAMPLED_GRID if samples is not None else MAX_POINTS
    if grid.size > most:
        said = f"{grid.size:,}" if grid.size < 10**15 else "over 10^15"
        advice = (
            "give fewer values"
            if samples is not None
            else "give fewer values, or draw some points with sweep_samples"
        )
        what = "to draw from" if samples is not None else "jobs"
        raise InvalidInput(f"the sweep has {said} points; at most {most:,} ({what}): {advice}")
    return grid


def choose(grid: Grid, samples: int | None, rng: random.Random) -> list[Point]:
    """The points the sweep runs: the whole grid, in grid order; or `samples` of them at
    random without repeats (in grid order), all of them when it has no more."""
    if samples is None:
        return [grid.point(i) for i in range(grid.size)]
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_POINTS:
        raise InvalidInput(f"sweep_samples must be a whole number from 1 to {MAX_POINTS}")
    picked = sorted(rng.sample(range(grid.size), min(samples, grid.size)))
    return [grid.point(i) for i in picked]


def check_max_parallel(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
        raise InvalidInput(f"max_parallel must be a whole number from 1 to {MAX_PARALLEL}")
    return value


def as_text(value: Scalar) -> str:
    """A value as a placeholder writes it: strings as they are, the rest as JSON (`true`,
    `16`, `0.0001`)."""
    return value if isinstance(value, str) else json.dumps(value)


def placeholders(text: str) -> set[str]:
    """The names `text`'s placeholders name (not its `{{literal}}` ones)."""
    return {m.group(2) for m in _PLACEHOLDER.finditer(text) if m.group(2)}


def _where(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return f"config field {out!r}" if out else "the config"


def _strings(
    value: Any, path: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], str]]:
    """Every string of a config (not its keys), with where it is."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, (*path, k))]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, (*path, i))]
    return []


def check_uses(config: Mapping[str, Any], grid: Grid) -> None:
    """Refuse a placeholder that names no parameter, and a parameter no placeholder uses."""
    env = config.get("env")
    if isinstance(env, Mapping) and PARAMS_ENV in env:
        raise InvalidInput(f"config field 'env.{PARAMS_ENV}' is the sweep's to set: leave it out")
    used: set[str] = set()
    for path, text in _strings(config):
        for name in sorted(placeholders(text)):
            if name not in grid.names:
                raise InvalidInput(
                    f"placeholder {{{name}}} in {_where(path)} names no sweep parameter (the "
                    f"sweep has {', '.join(grid.names)}): fix its name, or write {{{{{name}}}}} "
                    f"for a literal {{{name}}}"
                )
            used.add(name)
    unused = [n for n in grid.names if n not in used]
    if unused:
        raise InvalidInput(
            f"sweep parameter {unused[0]!r} is used by no placeholder: write {{{unused[0]}}} "
            "in the command, an env value or the config, or leave the parameter out"
        )


def _fill(text: str, point: Point) -> str:
    def one(m: re.Match[str]) -> str:
        return "{" + m.group(1) + "}" if m.group(1) else as_text(point[m.group(2)])

    return _PLACEHOLDER.sub(one, text)


def _substitute(value: Any, point: Point, typed: bool) -> Any:
    """`typed`: a string that is one placeholder and nothing else takes the value itself
    (`"batch_size": "{batch}"` → 16), as a config's own fields may; the command's and the
    env's stay strings."""
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if typed and whole is not None and whole.group(2):
            return point[whole.group(2)]
        return _fill(value, point)
    if isinstance(value, dict):
        return {
            k: _substitute(v, point, typed and k not in ("command", "env"))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_substitute(v, point, typed) for v in value]
    return value


def job_config(config: Mapping[str, Any], point: Point) -> dict[str, Any]:
    """The config of the point's job: placeholders replaced, the point in its env."""
    out: dict[str, Any] = _substitute(dict(config), point, True)
    env = out.get("env")
    params = json.dumps(point, separators=(",", ":"))
    out["env"] = {**(env if isinstance(env, dict) else {}), PARAMS_ENV: params}
    return out


def params_of(config: Mapping[str, Any]) -> Point:
    """The point a sweep's job runs, as its config's env says (empty: none)."""
    env = config.get("env")
    raw = env.get(PARAMS_ENV) if isinstance(env, Mapping) else None
    try:
        found = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True, slots=True)
class Planned:
    grid: Grid
    points: list[Point]
    configs: list[dict[str, Any]]


def plan(config: Mapping[str, Any], sweep: Any, samples: int | None, rng: random.Random) -> Planned:
    """A sweep's jobs' configs, every check made (the configs themselves are the caller's to
    check as a submit's are)."""
    grid = check_grid(sweep, samples)
    check_uses(config, grid)
    points = choose(grid, samples, rng)
    size = len(json.dumps(config, default=str)) * len(points)
    if size > MAX_SWEEP_BYTES:
        raise InvalidInput(
            f"the sweep's {len(points)} configs come to about {size:,} bytes; at most "
            f"{MAX_SWEEP_BYTES:,}: run fewer points, or a smaller config"
        )
    return Planned(grid, points, [job_config(config, p) for p in points])


def status_of(statuses: Sequence[JobStatus]) -> str:
    """A sweep's status, of its latest jobs': running while any is on a worker, else queued
    while any waits (or none is queued yet); once all ended, completed if all did, else
    failed if any did, else cancelled."""
    have = set(statuses)
    if have & PLACED_JOB:
        return "running"
    if have & WAITING_JOB or not have:  # none yet: its jobs are being queued
        return "queued"
    if have == {JobStatus.COMPLETED}:
        return JobStatus.COMPLETED.value
    return (JobStatus.FAILED if JobStatus.FAILED in have else JobStatus.CANCELLED).value


def has_room(running: int, max_parallel: int | None) -> bool:
    """Whether a sweep with `running` jobs on workers may start another."""
    return max_parallel is None or running < max_parallel
