"""`python -m bench --baseline DIR`: each scenario against a server of another checkout's code
(the baseline) and one of this checkout's (the current), in turn in one run, and each figure
of the table as current ÷ baseline (#39: before and after measured in the same run on the same
machine). The harness and the simulated workers are this checkout's on both sides, so that the
load is the same."""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import bench
from bench.report import Result, fmt
from gpufleet.errors import ConfigurationError

BASELINE, CURRENT = "baseline", "current"
HERE = Path(bench.__file__).resolve().parents[1]  # the checkout the harness runs from


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a checkout whose `src` the servers run, and its commit when
    the run began."""

    name: str
    root: Path
    commit: str
    uncommitted_changes: bool

    @classmethod
    def of(cls, name: str, root: Path) -> Side:
        def git(*args: str) -> str:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
            )
            return done.stdout.strip() if done.returncode == 0 else ""

        commit = git("rev-parse", "--short", "HEAD") or "not a git checkout"
        return cls(name, root, commit, bool(git("status", "--porcelain", "--untracked-files=no")))

    @property
    def src(self) -> Path:
        return self.root / "src"

    def describe(self) -> dict[str, Any]:
        return {
            "checkout": str(self.root),
            "commit": self.commit,
            "uncommitted_changes": self.uncommitted_changes,
        }


Sides = tuple[Side, Side]


def sides(baseline: Path) -> Sides:
    """The baseline checkout at `baseline`, and this one."""
    root = baseline.resolve()
    if not (root / "src" / "gpufleet" / "__init__.py").is_file():
        raise ConfigurationError(
            f"--baseline {baseline}: no src/gpufleet there; name a checkout of gpufleet, "
            "e.g. `git worktree add /tmp/base <commit>` then --baseline /tmp/base"
        )
    return Side.of(BASELINE, root), Side.of(CURRENT, HERE)


def numbers(value: Any) -> list[float] | None:
    """A figure as numbers: 12.5 -> [12.5]; "45% / 30%" (the CPU shares) -> [45.0, 30.0];
    None for a figure that is no number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return [float(value)]
    try:
        return [float(p.strip().rstrip("%").replace(",", "")) for p in str(value).split(" / ")]
    except ValueError:
        return None


def ratio(current: Any, baseline: Any) -> float | str | None:
    """current ÷ baseline, part by part for a figure of several ("a / b"); None where either
    is no number, or a baseline's is not above 0 or a current one below (scenario 1's answer →
    event goes negative when the offer beats the answer: no ratio says anything then)."""
    cur, base = numbers(current), numbers(baseline)
    if cur is None or base is None or len(cur) != len(base):
        return None
    if any(b <= 0 for b in base) or any(c < 0 for c in cur):
        return None
    parts = [round(c / b, 2) for c, b in zip(cur, base, strict=True)]
    return parts[0] if len(parts) == 1 else " / ".join(f"{p:.2f}" for p in parts)


@dataclass
class Row:
    """One figure of the table, each side's value in each round, and their ratios."""

    scenario: str
    database: str
    metric: str
    target: str
    baseline: list[Any] = field(default_factory=list)
    current: list[Any] = field(default_factory=list)
    ratio: list[float | str | None] = field(default_factory=list)
    verdict: list[bool | None] = field(default_factory=list)  # the current side's


def _by_scenario(results: Sequence[Result]) -> dict[tuple[str, str], dict[str, list[Result]]]:
    groups: dict[tuple[str, str], dict[str, list[Result]]] = {}
    for r in results:
        sides_of = groups.setdefault((r.scenario, r.database), {BASELINE: [], CURRENT: []})
        sides_of[r.side].append(r)
    return groups


def rows(results: Sequence[Result]) -> list[Row]:
    """The table's rows: a row a check of a scenario, round by round (rounds in order)."""
    out: list[Row] = []
    for (scenario, database), of in _by_scenario(results).items():
        rounds = max(len(of[BASELINE]), len(of[CURRENT]))
        names: dict[str, str] = {}  # metric -> target, the current side's checks first
        for r in of[CURRENT] + of[BASELINE]:
            for c in r.checks:
                names.setdefault(c.metric, c.target)
        for metric, target in names.items():
            row = Row(scenario, database, metric, target)
            for n in range(rounds):
                base = _check(of[BASELINE], n, metric)
                cur = _check(of[CURRENT], n, metric)
                row.baseline.append(base[0])
                row.current.append(cur[0])
                row.ratio.append(ratio(cur[0], base[0]))
                row.verdict.append(cur[1])
            out.append(row)
    return out


def _check(side: list[Result], n: int, metric: str) -> tuple[Any, bool | None]:
    if n >= len(side):
        return None, None
    for c in side[n].checks:
        if c.metric == metric:
            return c.value, c.ok
    return None, None


def flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number of a result's metrics, by its dotted path."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{path}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = value
    return out


def metric_ratios(results: Sequence[Result]) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """For the JSON: every number of every scenario's metrics, each side's a round, and
    current ÷ baseline."""
    out: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for (scenario, database), of in _by_scenario(results).items():
        base = [flat(r.metrics) for r in of[BASELINE]]
        cur = [flat(r.metrics) for r in of[CURRENT]]
        paths = dict.fromkeys(p for m in cur + base for p in m)
        figures: dict[str, dict[str, list[Any]]] = {}
        for path in paths:
            b = [m.get(path) for m in base]
            c = [m.get(path) for m in cur]
            figures[path] = {
                BASELINE: b,
                CURRENT: c,
                "ratio": [ratio(x, y) for x, y in zip(c, b, strict=False)],
            }
        out[f"{scenario} {database}"] = figures
    return out


def summary(results: Sequence[Result], base: Side, cur: Side, rounds: int) -> dict[str, Any]:
    """What summary.json gets besides the results."""
    return {
        BASELINE: base.describe(),
        CURRENT: cur.describe(),
        "rounds": rounds,
        "order": "baseline then current, each round, each scenario",
        "comparison": [asdict(r) for r in rows(results)],
        "metric_ratios": metric_ratios(results),
    }


COLUMNS = ("scenario", "database", "metric", BASELINE, CURRENT, "current ÷ baseline", "target")


def _cells(results: Sequence[Result]) -> Iterator[list[str]]:
    """The table's cells, row by row (COLUMNS, then the current side's verdicts), each round's
    value after the other, `;` between; a scenario and its database on its first row only."""
    verdicts = {True: "met", False: "missed", None: "-"}
    last = None
    for row in rows(results):
        first = (row.scenario, row.database) != last
        last = (row.scenario, row.database)
        name = next(r.name for r in results if r.scenario == row.scenario)
        yield [
            f"{row.scenario}. {name}" if first else "",
            row.database if first else "",
            row.metric,
            "; ".join(fmt(v) for v in row.baseline),
            "; ".join(fmt(v) for v in row.current),
            _ratios(row.ratio),
            row.target,
            "; ".join(verdicts[v] for v in row.verdict),
        ]


def _ratios(ratios: list[float | str | None]) -> str:
    """Each round's ratio; over several rounds of single figures, their median too."""
    cell = "; ".join(fmt(v) for v in ratios)
    singles = [r for r in ratios if isinstance(r, float)]
    if len(ratios) > 1 and len(singles) == len(ratios):
        cell += f" (median {statistics.median(singles):.2f})"
    return cell


def heading(base: Side, cur: Side, rounds: int) -> str:
    def one(side: Side) -> str:
        dirty = ", uncommitted changes" if side.uncommitted_changes else ""
        return f"{side.name} {side.root} at {side.commit}{dirty}"

    return f"{one(base)}; {one(cur)}; {rounds} round(s), baseline then current"


def print_comparison(
    results: Sequence[Result], base: Side, cur: Side, rounds: int, console: Console
) -> None:
    table = Table(title=f"gpufleet benchmarks, current ÷ baseline\n{heading(base, cur, rounds)}")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in (BASELINE, CURRENT, COLUMNS[5]) else "left")
    table.add_column("verdict (current)")
    for cells in _cells(results):
        table.add_row(*cells)
    console.print(table)
    for r in results:
        for note in r.notes:
            console.print(f"[dim]{r.scenario} ({r.side}, round {r.round + 1}). {note}")


def markdown_comparison(results: Sequence[Result], base: Side, cur: Side, rounds: int) -> str:
    lines = [
        f"Before/after in one run: {heading(base, cur, rounds)}.",
        "",
        "| " + " | ".join(COLUMNS) + " | verdict (current) |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in _cells(results)]
    return "\n".join(lines) + "\n"
