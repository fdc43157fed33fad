"""Log lines: JSON or text, labelled with the worker, job and attempt they concern."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet import logs

LOGGERS = ("", *logs.UVICORN_LOGGERS)


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """What configure() writes, with the global logging state put back afterwards."""
    saved = {
        name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level)
        for name in LOGGERS
    }
    propagate = {name: logging.getLogger(name).propagate for name in logs.UVICORN_LOGGERS}
    # Apps started by earlier tests in this process set the replica and may leave labels.
    logs.set_replica(None)
    for var in logs._ids.values():
        var.set(None)
    stream = io.StringIO()
    yield stream
    for name, (handlers, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
    for name, value in propagate.items():
        logging.getLogger(name).propagate = value
    logs.set_replica(None)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line]


def record(message: str = "hello", **extra: object) -> logging.LogRecord:
    made = logging.getLogger("gpufleet.test").makeRecord(
        "gpufleet.test", logging.INFO, __file__, 1, message, (), None, extra=extra
    )
    logs.ContextFilter().filter(made)
    return made


def test_a_json_line_has_the_time_in_utc_the_level_the_logger_and_the_message(
    output: io.StringIO,
) -> None:
    logs.configure("info", "json", output)
    logging.getLogger("gpufleet.server").info("worker %s registered", "gpu-1")
    (line,) = lines(output)
    assert line.keys() == {"ts", "level", "logger", "message"}
    assert line["level"] == "INFO"
    assert line["logger"] == "gpufleet.server"
    assert line["message"] == "worker gpu-1 registered"
    ts = datetime.fromisoformat(str(line["ts"]))
    assert ts.utcoffset() == timedelta(0)


def test_bound_ids_and_the_replica_label_every_line_in_the_block(output: io.StringIO) -> None:
    logs.configure("info", "json", output)
    logs.set_replica("r1")
    log = logging.getLogger("gpufleet.server")
    with logs.bound(worker_id="w_1", job_id="j_1", attempt_id="a_1"):
        log.info("first")
        log.warning("second")
    log.info("after")
    first, second, after = lines(output)
    for line in (first, second):
        assert {k: line[k] for k in ("replica", "worker_id", "job_id", "attempt_id")} == {
            "replica": "r1",
            "worker_id": "w_1",
            "job_id": "j_1",
            "attempt_id": "a_1",
        }
    assert after["replica"] == "r1"
    assert "worker_id" not in after and "job_id" not in after


def test_a_nested_block_adds_labels_and_gives_the_outer_ones_back() -> None:
    with logs.bound(worker_id="w_1"):
        with logs.bound(job_id="j_1"):
            inner = record()
        outer = record()
    assert (inner.worker_id, inner.job_id) == ("w_1", "j_1")  # type: ignore[attr-defined]
    assert (outer.worker_id, outer.job_id) == ("w_1", None)  # type: ignore[attr-defined]


def test_ids_given_with_extra_win_over_the_bound_ones() -> None:
    with logs.bound(job_id="j_bound"):
        made = record(job_id="j_extra")
    assert made.job_id == "j_extra"  # type: ignore[attr-defined]


async def test_labels_bound_in_one_task_stay_out_of_another() -> None:
    async def request(worker_id: str) -> str | None:
        logs.bind(worker_id=worker_id)
        await asyncio.sleep(0)
        return record().worker_id  # type: ignore[attr-defined, no-any-return]

    seen = await asyncio.gather(request("w_a"), request("w_b"))
    assert list(seen) == ["w_a", "w_b"]
    assert record().worker_id is None  # type: ignore[attr-defined]


def test_a_traceback_is_one_escaped_line_under_exc(output: io.StringIO) -> None:
    logs.configure("info", "json", output)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("gpufleet.server").exception("sweep failed")
    assert len(output.getvalue().splitlines()) == 1
    (line,) = lines(output)
    assert line["message"] == "sweep failed"
    assert str(line["exc"]).startswith("Traceback")
    assert "RuntimeError: boom" in str(line["exc"])


@given(st.text())
def test_any_message_is_one_line_that_reads_back_unchanged(message: str) -> None:
    text = logs.JsonFormatter().format(record(message))
    assert "\n" not in text
    assert json.loads(text)["message"] == message


def test_text_lines_keep_the_classic_shape_and_add_worker_and_job_when_known() -> None:
    formatter = logs.TextFormatter()
    plain = formatter.format(record("started"))
    with logs.bound(worker_id="w_1", job_id="j_1"):
        labelled = formatter.format(record("lost"))
    assert plain.endswith(" INFO gpufleet.test: started")
    assert labelled.endswith(" INFO gpufleet.test: lost worker=w_1 job=j_1")


def test_uvicorn_lines_go_through_the_same_handler(output: io.StringIO) -> None:
    noisy = logging.StreamHandler(io.StringIO())
    logging.getLogger("uvicorn.access").addHandler(noisy)
    logging.getLogger("uvicorn.access").propagate = False
    logs.configure("info", "json", output)
    with logs.bound(worker_id="w_1"):
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d',
            "127.0.0.1:5000",
            "POST",
            "/api/workers/heartbeat",
            "1.1",
            200,
        )
    (line,) = lines(output)
    assert noisy.stream.getvalue() == ""
    assert line["logger"] == "uvicorn.access"
    assert line["worker_id"] == "w_1"
    assert "POST /api/workers/heartbeat" in str(line["message"])


def test_configuring_again_replaces_the_handler_instead_of_doubling_lines(
    output: io.StringIO,
) -> None:
    logs.configure("info", "text", io.StringIO())
    logs.configure("warning", "json", output)
    log = logging.getLogger("gpufleet.server")
    log.info("below the level")
    log.warning("once")
    assert [line["message"] for line in lines(output)] == ["once"]


def test_an_unknown_format_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.configure("info", "yaml")  # type: ignore[arg-type]
