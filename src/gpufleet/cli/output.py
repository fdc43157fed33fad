"""How the operator commands print: rich tables for people, JSON for scripts, readable times.

Whatever the orchestrator sends (a job's output, errors, names, labels, audit details) is
printed through `safe`, `echo`, `text` or the tables here: a job that prints terminal escapes
cannot recolour, retitle or rewrite the operator's terminal, and rich markup in it (`[bold]`)
is printed as it is. The orchestrator keeps and serves the text unchanged.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet.client.text import safe as safe
from gpufleet.client.text import size as size

_STYLES = {
    "idle": "green",
    "completed": "green",
    "busy": "cyan",
    "running": "cyan",
    "offered": "cyan",
    "connecting": "yellow",
    "queued": "yellow",
    "draining": "yellow",
    "preempted": "yellow",
    "offline": "red",
    "failed": "red",
    "lost": "red",
    "cancelled": "magenta",
}


def echo(message: str, err: bool = False) -> None:
    """One line of plain output (to stderr with `err`), control characters escaped."""
    click.echo(safe(message), err=err)


def text(value: Any, style: str = "") -> Text:
    """Text for rich to print as it is: control characters escaped, no markup read."""
    return Text(safe(str(value)), style=style)


@functools.cache
def console() -> Console:
    """stdout; piped output gets a wide page so tables keep whole ids instead of folding."""
    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(highlight=False, width=200)
    return out


@functools.cache
def errors() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(data: Any, indent: int | None = 2) -> None:
    """Plain JSON on stdout, one document, for `jq` and scripts (every control character
    escaped: json escapes all but DEL)."""
    print(json.dumps(data, indent=indent, sort_keys=False).replace("\x7f", "\\u007f"))


def status(value: str | None, words: str | None = None) -> Text:
    """A status as text (coloured on a terminal, where colour is allowed); `words`: what to
    print in its colour instead (a worker's presence)."""
    shown = value or "-"
    return text(words or shown, style=_STYLES.get(shown, ""))


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], wrap: str | None = None) -> Table:
    """Columns kept on one line, but `wrap` (default: the last), which takes what is left."""
    grid = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
    flexible = wrap or columns[-1]
    for name in columns:
        grid.add_column(name, no_wrap=name != flexible, overflow="fold")
    for row in rows:
        grid.add_row(*(cell if isinstance(cell, Text) else text(_cell(cell)) for cell in row))
    return grid


def fields(pairs: Iterable[tuple[str, Any]]) -> Table:
    """A `name  value` listing for one record."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in pairs:
        grid.add_row(name, value if isinstance(value, Text) else text(_cell(value)))
    return grid


def _cell(value: Any) -> str:
    if value is None or value == "" or value == {}:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ago(value: str | None, now: datetime | None = None) -> str:
    """`12s ago`, `5m ago`, `3h ago`, `2d ago`; `-` for no time."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - moment).total_seconds())
    if seconds < 0:
        return "just now"
    for span, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= span:
            return f"{seconds // span}{unit} ago"
    return f"{seconds}s ago"


def clock(value: str | None) -> str:
    """Local time to the second: `2025-01-31 12:00:03`."""
    moment = parse_time(value)
    return "-" if moment is None else f"{moment.astimezone():%Y-%m-%d %H:%M:%S}"


def when(value: str | None) -> str:
    """Local time to the second, with how long ago: `2025-01-31 12:00:03 (5m ago)`."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return f"{clock(value)} ({ago(value)})"


def duration(start: str | None, end: str | None) -> str:
    """`1m 05s` between two times (now for an open end); `-` when it never started."""
    first = parse_time(start)
    if first is None:
        return "-"
    seconds = int(((parse_time(end) or datetime.now(UTC)) - first).total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{max(seconds, 0)}s"


def progress_text(progress: dict[str, Any] | None, *, metrics: bool = True) -> str:
    """`120/300 loss=0.41` from `{"step", "total", "metrics"}`."""
    if not progress:
        return "-"
    step, total = progress.get("step"), progress.get("total")
    shown = f"{step}/{total}" if total else f"step {step}"
    if metrics:
        shown = f"{shown} {metrics_text(progress.get('metrics') or {})}"
    return safe(shown.strip())


def metrics_text(metrics: dict[str, Any]) -> str:
    return safe(
        " ".join(
            f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
            for name, value in metrics.items()
        )
    )


def waiting(wait: dict[str, Any]) -> str:
    """A job's `waiting` (or an unmatched job) in the CLI's words: commands, not endpoints."""
    summary: str = wait["summaries"]["cli"]
    return summary


def money(amount: float) -> str:
    """An amount of the pools' cost (docs/capacity.md): `$12.50`."""
    return f"${amount:,.2f}"
