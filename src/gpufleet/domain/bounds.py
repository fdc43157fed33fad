"""The sizes a request may not pass (docs/security.md, Bounds), and what is done past them.

Each bound keeps one client from filling the server's memory or stalling its loop for all:
a job's progress is stored whole and read back often, a log batch is inserted in one
transaction, a log page is built in memory, and every open event stream holds a task.
The orchestrator refuses what is over (progress, log batches), or stops early and says
where to go on (log pages), or closes the oldest (streams); gpufleet's worker keeps under
the first two before it sends (`trim_progress`, `worker/logship.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import orjson

from gpufleet.domain.jsonpolicy import readable

T = TypeVar("T")
P = TypeVar("P", bound=Mapping[str, Any])

# A job's progress as stored: its canonical JSON (compact, UTF-8), at most 16 KiB.
MAX_PROGRESS_BYTES = 16 * 1024
# The progress lines a report carries before its progress (`points`): every one the job wrote
# since the worker's last report, thinned evenly by the worker to fit (`fit_points`).
MAX_REPORT_POINTS = 200
MAX_REPORT_POINTS_BYTES = 512 * 1024
# A log batch: the UTF-8 text of its lines together (docs/protocol.md: 1 MiB a batch).
MAX_LOG_BATCH_BYTES = 1024 * 1024
MAX_LOG_BATCH_LINES = 1000
# A page of log lines read back: its lines' text, whatever `limit` asks (at least one line).
MAX_LOG_PAGE_BYTES = 4 * 1024 * 1024
# A search of a job's log (`?q=`): the text sought, in characters; a line is at most 64 KiB.
MAX_LOG_SEARCH_CHARS = 256
# Event streams (`/api/events` and log follows) one key holds open on one replica; one
# more closes the oldest.
MAX_STREAMS_PER_KEY = 20
# What a trimmed progress keeps of its metrics: numbers under short names.
_MAX_METRIC_NAME = 64


def json_size(value: Any) -> int:
    """The bytes of `value`'s canonical JSON: compact, UTF-8, as the policy stores it."""
    try:
        return len(orjson.dumps(value))
    except TypeError:  # what the policy would make of it: a huge integer, a lone surrogate
        return len(orjson.dumps(readable(value)))


def progress_problem(progress: Mapping[str, Any] | None) -> str | None:
    """Why `progress` may not be stored, or None."""
    if progress is None:
        return None
    size = json_size(progress)
    if size <= MAX_PROGRESS_BYTES:
        return None
    return (
        f"progress is {size} bytes of JSON, over the limit of {MAX_PROGRESS_BYTES} bytes "
        "(16 KiB); report step, total and a few numeric metrics, and keep the rest in the "
        "job's own files or its log"
    )


def points_problem(points: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a report's earlier progress points may not be stored, or None."""
    if len(points) > MAX_REPORT_POINTS:
        return (
            f"the report carries {len(points)} progress points, over the limit of "
            f"{MAX_REPORT_POINTS} a report; send every few of them, or in several reports"
        )
    size = json_size(list(points))
    if size <= MAX_REPORT_POINTS_BYTES:
        return None
    return (
        f"the report's progress points are {size} bytes of JSON, over the limit of "
        f"{MAX_REPORT_POINTS_BYTES} bytes (512 KiB); send fewer of them, or smaller ones"
    )


def evenly(items: Sequence[T], count: int) -> list[T]:
    """At most `count` of `items`, spread evenly over them, the first and the last kept."""
    if len(items) <= count:
        return list(items)
    if count < 2:
        return list(items[len(items) - count :])
    last = len(items) - 1
    return [items[round(i * last / (count - 1))] for i in range(count)]


def fit_points(points: Sequence[P]) -> list[P]:
    """`points` thinned evenly (the first and the last kept) until `points_problem` passes
    them: each is a progress already fitted by `trim_progress`, so some always do."""
    room = MAX_REPORT_POINTS
    while True:
        chosen = evenly(points, room)
        if points_problem(chosen) is None:
            return chosen
        room //= 2


def log_batch_problem(texts: Sequence[str]) -> str | None:
    """Why a batch of log lines (their texts) may not be stored, or None."""
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    if size <= MAX_LOG_BATCH_BYTES:
        return None
    return (
        f"the log batch holds {size} bytes of text in {len(texts)} lines, over the limit of "
        f"{MAX_LOG_BATCH_BYTES} bytes (1 MiB) a batch; send it in smaller batches"
    )


def _count(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def progress_summary(progress: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a list shows of a job's progress: its step and total (numbers, else null); the
    whole object is read from the job itself."""
    if progress is None:
        return None
    return {"step": _count(progress.get("step")), "total": _count(progress.get("total"))}


def trim_progress(progress: Mapping[str, Any]) -> dict[str, Any]:
    """`progress` made one the orchestrator takes (`progress_problem` is None): as it is when
    it fits; else its step, total and as many of its numeric metrics (short names, in order)
    as fit, with `"trimmed": true`. A chatty trainer's progress is never refused."""
    whole = dict(progress)
    if progress_problem(whole) is None:
        return whole
    kept: dict[str, Any] = {
        "step": _count(whole.get("step")),
        "total": _count(whole.get("total")),
        "metrics": {},
        "trimmed": True,
    }
    metrics = whole.get("metrics")
    budget = MAX_PROGRESS_BYTES - json_size(kept)
    if isinstance(metrics, Mapping):
        for name, value in metrics.items():
            number = _count(value)
            if number is None or not isinstance(name, str) or len(name) > _MAX_METRIC_NAME:
                continue
            cost = json_size({name: number}) - 1  # `"name":value,` within the object
            if cost > budget:
                break
            kept["metrics"][name] = number
            budget -= cost
    return kept


def log_search_problem(text: str, name: str = "q") -> str | None:
    """Why a log search's text (given as `name`) cannot be sought, if it cannot: what to
    change, in a sentence."""
    if len(text) > MAX_LOG_SEARCH_CHARS:
        return (
            f"{name} is {len(text)} characters; search for at most {MAX_LOG_SEARCH_CHARS} "
            "(a shorter part of the line)"
        )
    return None
