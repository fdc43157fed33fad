"""Results: percentiles, the table against the targets, and JSON files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0-100), nearest-rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def ms_summary(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """Count, p50/p90/p99 and max of durations given in seconds, in milliseconds."""

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 2)

    return {
        "count": len(seconds),
        "p50_ms": ms(percentile(seconds, 50)),
        "p90_ms": ms(percentile(seconds, 90)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds) if seconds else None),
    }


@dataclass
class Check:
    """One target: what was measured against what was asked. ok=None: not measurable."""

    metric: str
    value: float | str | None
    target: str
    ok: bool | None


@dataclass
class Result:
    scenario: str
    name: str
    database: str
    params: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # A --baseline run's: which code's server ("baseline" or "current"), and which round.
    side: str = ""
    round: int = 0

    def check(self, metric: str, value: float | str | None, target: str, ok: bool | None) -> None:
        self.checks.append(Check(metric, value, target, ok))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def machine() -> dict[str, Any]:
    """The machine the run happened on: what docs/benchmarks.md quotes."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    try:
        free = subprocess.run(["free", "-h"], capture_output=True, text=True, check=False).stdout
    except OSError:
        free = ""
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory": free.strip(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average": os.getloadavg(),
    }


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def print_table(results: Sequence[Result], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="gpufleet benchmarks against the targets", show_lines=False)
    for col in ("scenario", "database", "metric", "value", "target", "verdict"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for r in results:
        label = f"{r.scenario}. {r.name}"
        rows = r.checks or [Check("-", None, "-", None)]
        for i, c in enumerate(rows):
            verdict = {True: "[green]met", False: "[red]missed", None: "[yellow]n/a"}[c.ok]
            table.add_row(
                label if i == 0 else "",
                r.database if i == 0 else "",
                c.metric,
                fmt(c.value),
                c.target,
                verdict,
            )
    console.print(table)
    for r in results:
        for note in r.notes:
            console.print(f"[dim]{r.scenario}. {note}")


def write_json(
    results: Sequence[Result],
    out_dir: Path,
    size: str,
    extra: dict[str, Any] | None = None,
    markdown: str | None = None,
) -> Path:
    """One JSON file a result, `summary.json` (with `extra`'s keys), and `summary.md`
    (`markdown`, or the table of print_table)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC)
    doc = {
        "date": stamp.isoformat(timespec="seconds"),
        "size": size,
        "machine": machine(),
        "results": [r.as_dict() for r in results],
    }
    for r in results:
        side = f"-{r.side}-{r.round}" if r.side else ""
        path = out_dir / f"scenario-{r.scenario.replace('/', '-')}-{r.database}{side}.json"
        path.write_text(json.dumps({**doc, "results": [r.as_dict()]}, indent=2, default=str))
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps({**doc, **(extra or {})}, indent=2, default=str))
    (out_dir / "summary.md").write_text(markdown or markdown_table(results))
    return summary


def markdown_table(results: Sequence[Result]) -> str:
    """The table of print_table, in Markdown, for docs/benchmarks.md."""
    verdicts = {True: "met", False: "**missed**", None: "-"}
    lines = [
        "| scenario | database | metric | value | target | verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for r in results:
        for i, c in enumerate(r.checks):
            label = f"{r.scenario}. {r.name}" if i == 0 else ""
            db = r.database if i == 0 else ""
            lines.append(
                f"| {label} | {db} | {c.metric} | {fmt(c.value)} | {c.target} | {verdicts[c.ok]} |"
            )
    return "\n".join(lines) + "\n"
