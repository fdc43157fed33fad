"""Jobs that run after others (docs/jobs.md, Dependencies): what a submit may name in its
`depends_on` and `inputs`, and whether a job's dependencies let it run, keep it waiting on
one of them, or doom it (`decide`). Dependencies exist before their dependent, so there are
no cycles to find."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.states import TERMINAL_JOB, JobStatus
from gpufleet.errors import InvalidInput

MAX_DEPENDENCIES = 100  # a job's `depends_on` entries
MAX_PATTERNS = 32  # glob patterns a job takes from one upstream
MAX_PATTERN = 512  # characters in one pattern
_JOB_ID = re.compile(r"j_[A-Za-z0-9_-]{1,60}")


class On(StrEnum):
    """What of its dependency a job waits for."""

    COMPLETED = "completed"  # it completed; failed or cancelled dooms the dependent
    ENDED = "ended"  # it ended, however


@dataclass(frozen=True, slots=True)
class Dependency:
    job_id: str
    on: On = On.COMPLETED


@dataclass(frozen=True, slots=True)
class Upstream:
    """A dependency as it stands: what `decide` reads."""

    job_id: str
    on: On
    status: JobStatus


@dataclass(frozen=True, slots=True)
class Satisfied:
    pass


@dataclass(frozen=True, slots=True)
class Waiting:
    job_id: str  # the first dependency, in the submit's order, that has not ended


@dataclass(frozen=True, slots=True)
class Doomed:
    job_id: str  # the first dependency that ended otherwise than it needs
    status: JobStatus

    @property
    def reason(self) -> str:
        """Why the dependent is cancelled, naming the dependency."""
        return (
            f"cancelled: its dependency {self.job_id} {self.status.value}, so it cannot run "
            "(depends_on with on: completed); submit it again once the dependency completed"
        )


Decision = Satisfied | Waiting | Doomed


def satisfies(on: On, status: JobStatus) -> bool | None:
    """True: this dependency is met; False: it never will be; None: not yet."""
    if status not in TERMINAL_JOB:
        return None
    return on is On.ENDED or status is JobStatus.COMPLETED


def decide(upstreams: Sequence[Upstream]) -> Decision:
    """Doomed by the first dependency that can never be met; else waiting on the first not
    ended yet; else satisfied (no dependencies: satisfied)."""
    waiting: str | None = None
    for up in upstreams:
        met = satisfies(up.on, up.status)
        if met is False:
            return Doomed(up.job_id, up.status)
        if met is None and waiting is None:
            waiting = up.job_id
    return Satisfied() if waiting is None else Waiting(waiting)


def check(
    depends_on: Sequence[str | Mapping[str, str]],
    inputs: Mapping[str, Sequence[str]],
) -> tuple[tuple[Dependency, ...], dict[str, tuple[str, ...]]]:
    """A submit's `depends_on` and `inputs`, checked: job ids, `on`, no job twice, at most
    `MAX_DEPENDENCIES`; each input's job among the dependencies, its patterns relative globs
    without `.` or `..` segments. `InvalidInput` says which entry is wrong."""
    if len(depends_on) > MAX_DEPENDENCIES:
        raise InvalidInput(
            f"depends_on names {len(depends_on)} jobs, over the limit of {MAX_DEPENDENCIES}; "
            "make a job that waits on some of them, and depend on it"
        )
    deps: list[Dependency] = []
    for n, entry in enumerate(depends_on):
        dep = _entry(n, entry)
        if any(d.job_id == dep.job_id for d in deps):
            raise InvalidInput(f"depends_on names job {dep.job_id} twice; name each job once")
        deps.append(dep)
    named = {d.job_id for d in deps}
    checked: dict[str, tuple[str, ...]] = {}
    for job_id, patterns in inputs.items():
        if job_id not in named:
            raise InvalidInput(
                f"inputs names job {job_id[:80]!r}, which is not in depends_on; "
                "a job takes the outputs only of jobs it depends on"
            )
        checked[job_id] = _patterns(job_id, patterns)
    return tuple(deps), checked


def _entry(n: int, entry: str | Mapping[str, str]) -> Dependency:
    if isinstance(entry, str):
        job_id, on = entry, On.COMPLETED.value
    else:
        if set(entry) - {"job", "on"} or "job" not in entry:
            raise InvalidInput(
                f"depends_on[{n}] must be a job id or {{'job': id, 'on': 'completed'|'ended'}}"
            )
        job_id, on = entry["job"], entry.get("on", On.COMPLETED.value)
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise InvalidInput(
            f"depends_on[{n}] is not a job id ({str(job_id)[:80]!r}); "
            "give ids as gpufleet shows them, like j_0a1b2c"
        )
    if on not in {o.value for o in On}:
        raise InvalidInput(f"depends_on[{n}]: 'on' is 'completed' or 'ended', not {on!r:.80}")
    return Dependency(job_id, On(on))


def _patterns(job_id: str, patterns: Sequence[str]) -> tuple[str, ...]:
    if not patterns or len(patterns) > MAX_PATTERNS:
        raise InvalidInput(
            f"inputs of job {job_id} need 1 to {MAX_PATTERNS} patterns, like 'output/**'"
        )
    for pattern in patterns:
        if problem := pattern_problem(pattern):
            raise InvalidInput(
                f"input pattern {pattern[:80]!r} of job {job_id} is refused: {problem}; "
                "give a relative glob over the job's artifact paths, like 'output/**'"
            )
    return tuple(dict.fromkeys(patterns))


def pattern_problem(pattern: str) -> str | None:
    """Why a glob cannot name artifacts of a job folder, or None."""
    if not pattern or len(pattern) > MAX_PATTERN:
        return f"it is empty or over {MAX_PATTERN} characters"
    if pattern.startswith("/") or "\\" in pattern:
        return "it is absolute or holds a backslash"
    if any(part in ("", ".", "..") for part in pattern.split("/")):
        return "it has an empty, '.' or '..' segment"
    if any(ord(c) < 32 or ord(c) == 127 for c in pattern):
        return "it holds a control character"
    return None


def _regex(pattern: str) -> re.Pattern[str]:
    """`**` any run of characters, slashes too; `*` within one name; `?` one character."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def selected(patterns: Sequence[str], paths: Sequence[str]) -> list[str]:
    """The paths any of the patterns matches, in the given order."""
    compiled = [_regex(p) for p in patterns]
    return [p for p in paths if any(r.fullmatch(p) for r in compiled)]
