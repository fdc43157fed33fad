"""NOTIFY payloads between replicas: topics, and the offers handed over with them."""

from __future__ import annotations

from typing import Any

import orjson

from gpufleet.server.bus import _MAX_PAYLOAD, payloads


def _decoded(
    origin: str,
    notify: set[str],
    close: set[str],
    handed: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    out = payloads(origin, notify, close, handed)
    assert all(len(p.encode()) < 8000 for p in out)  # PostgreSQL's limit
    return [orjson.loads(p) for p in out]


def test_topics_and_handed_events_travel_together() -> None:
    offer = {"type": "job_submit", "job_id": "j_1", "attempt_id": "a_1"}
    (message,) = _decoded("r1", {"jobs"}, {"worker:w_2"}, {"worker:w_1": [offer]})
    assert message == {
        "o": "r1",
        "e": {"worker:w_1": [offer]},
        "n": ["jobs"],
        "c": ["worker:w_2"],
    }


def test_an_event_too_long_to_travel_becomes_a_plain_notification() -> None:
    """The replica that hears it reads the offer from the database instead."""
    huge = {"type": "job_submit", "config": {"blob": "x" * _MAX_PAYLOAD}}
    small = {"type": "job_submit", "attempt_id": "a_2"}
    (message,) = _decoded("r1", set(), set(), {"worker:w_1": [huge], "worker:w_2": [small]})
    assert message["n"] == ["worker:w_1"]
    assert message["e"] == {"worker:w_2": [small]}


def test_many_topics_split_into_payloads_under_the_limit() -> None:
    topics = {f"worker:w_{n:06d}" for n in range(2000)}
    events = {f"worker:x_{n:04d}": [{"attempt_id": "a" * 500}] for n in range(40)}
    messages = _decoded("r1", topics, set(), events)
    assert len(messages) > 2
    heard = [t for m in messages for t in m.get("n", [])]
    assert sorted(heard) == sorted(topics)
    handed: dict[str, Any] = {}
    for m in messages:
        handed.update(m.get("e", {}))
    assert handed == events
