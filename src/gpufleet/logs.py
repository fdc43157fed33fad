"""Log lines for people (text) or for collectors (one JSON object a line), each labelled with
the worker, job and attempt it concerns.

The ids live in context variables: a request or a sweep binds them once and every line it
logs, uvicorn's access line included, carries them. Records may also name them directly with
`extra={"job_id": ...}`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any, Literal

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
IDS = ("worker_id", "job_id", "attempt_id")

_ids: dict[str, ContextVar[str | None]] = {
    name: ContextVar(f"gpufleet_{name}", default=None) for name in IDS
}
# One orchestrator process is one replica: set once at startup, seen by every task.
_replica: str | None = None
# One worker agent process is one worker: its id labels every line once it is known.
_process_worker: str | None = None


def _given(
    worker_id: str | None, job_id: str | None, attempt_id: str | None
) -> list[tuple[ContextVar[str | None], str]]:
    values = {"worker_id": worker_id, "job_id": job_id, "attempt_id": attempt_id}
    return [(_ids[name], value) for name, value in values.items() if value is not None]


def bind(
    *, worker_id: str | None = None, job_id: str | None = None, attempt_id: str | None = None
) -> None:
    """Label the rest of the current task's lines (a request runs in its own task)."""
    for var, value in _given(worker_id, job_id, attempt_id):
        var.set(value)


@contextlib.contextmanager
def bound(
    *, worker_id: str | None = None, job_id: str | None = None, attempt_id: str | None = None
) -> Iterator[None]:
    """Label the lines logged inside the block; the previous labels come back after it."""
    tokens = [(var, var.set(value)) for var, value in _given(worker_id, job_id, attempt_id)]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_replica(instance_id: str | None) -> None:
    global _replica
    _replica = instance_id


def set_worker(worker_id: str | None) -> None:
    """The worker agent's own id, for every line of the process (each agent is one worker)."""
    global _process_worker
    _process_worker = worker_id


class ContextFilter(logging.Filter):
    """Adds worker_id, job_id, attempt_id and replica to every record (None when unknown);
    ids given with `extra=` win over the bound ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _ids.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        if getattr(record, "worker_id", None) is None:
            record.worker_id = _process_worker
        if getattr(record, "replica", None) is None:
            record.replica = _replica
        return True


class TextFormatter(logging.Formatter):
    """The classic line, then ` worker=… job=…` when known."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        labels = "".join(
            f" {label}={value}"
            for label, value in (
                ("worker", getattr(record, "worker_id", None)),
                ("job", getattr(record, "job_id", None)),
            )
            if value
        )
        return super().formatMessage(record) + labels


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (ISO 8601, UTC), level, logger, message, then replica,
    worker_id, job_id and attempt_id when known, exc (the traceback) when there is one, and
    stack for stack_info=True."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, Any] = {
            "ts": ts.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ("replica", *IDS):
            value = getattr(record, name, None)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # ASCII escapes keep a line whole even with undecodable bytes in a message.
        return json.dumps(line)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure() installs, so a second call replaces it."""


def configure(level: str, fmt: Format = "text", stream: IO[str] | None = None) -> None:
    """Send the root logger and uvicorn's loggers through one handler on stderr (or stream).

    Start uvicorn with `log_config=None` afterwards, or it installs its own handlers again.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = _Handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
