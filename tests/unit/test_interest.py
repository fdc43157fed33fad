"""What a replica NOTIFYs the others (server/interest.py): only the classes of topics they
said they wait on, everything while it cannot know, and an announcement answered only once
the transactions that chose without it are over; an answer wakes the announced streams."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.server.bus import Replicas
from gpufleet.server.hub import Hub
from tests.unit.test_backends import SharedLock

NO_CONN = cast(AsyncConnection, None)
OFFER = {"type": "job_submit", "job_id": "j_1"}


def said(db: dict[str, Any]) -> list[dict[str, Any]]:
    """The NOTIFY payloads of the transactions since the last call."""
    out = [orjson.loads(p) for p in db["sent"]]
    db["sent"].clear()
    return out


def told(replicas: Replicas) -> list[dict[str, Any]]:
    """What the replica has to say on the link (announcements, answers) since the last call."""
    out = [orjson.loads(p) for p in replicas.interest.outbox]
    replicas.interest.outbox.clear()
    return out


def announcement(origin: str, *classes: str, version: int = 1, hello: bool = False) -> str:
    body: dict[str, Any] = {"o": origin, "i": list(classes), "v": version}
    if hello:
        body["h"] = 1
    return orjson.dumps(body).decode()


async def linked(hub: Hub, db: dict[str, Any]) -> Replicas:
    replicas = Replicas(hub, "r1", SharedLock(db, "r1"))
    await replicas.listen()
    return replicas


async def test_an_unlinked_replica_sends_every_topic() -> None:
    db: dict[str, Any] = {}
    replicas = Replicas(Hub(), "r1", SharedLock(db, "r1"))
    await replicas.send_in(NO_CONN, {"jobs", "audit"}, set(), {"worker:w_1": [OFFER]})
    (message,) = said(db)
    assert message["n"] == ["audit", "jobs"] and message["e"] == {"worker:w_1": [OFFER]}


async def test_a_linked_replica_sends_only_the_classes_another_waits_on() -> None:
    db: dict[str, Any] = {}
    replicas = await linked(Hub(), db)
    assert told(replicas)[0]["h"] == 1  # its hello, asking the others what they wait on
    replicas.heard(announcement("r2", "worker"))
    assert told(replicas) == [{"o": "r1", "a": "r2", "v": 1}]
    token = await replicas.send_in(
        NO_CONN, {"jobs", "audit", "worker:w_2"}, {"key:k_1"}, {"worker:w_1": [OFFER]}
    )
    replicas.settled(token)
    (message,) = said(db)
    assert message["n"] == ["worker:w_2"]
    assert message["e"] == {"worker:w_1": [OFFER]}
    assert message["c"] == ["key:k_1"]  # closing a stream always travels
    token = await replicas.send_in(NO_CONN, {"jobs", "audit"}, set(), {})
    replicas.settled(token)
    assert said(db) == []  # nobody waits on these: no NOTIFY at all


async def test_an_announcement_is_answered_once_the_transactions_that_chose_before_are_over() -> (
    None
):
    db: dict[str, Any] = {}
    replicas = await linked(Hub(), db)
    told(replicas)
    before = await replicas.send_in(NO_CONN, {"jobs"}, set(), {})
    assert said(db) == []  # nobody waits on `jobs` yet
    replicas.heard(announcement("r2", "jobs", version=3))
    after = await replicas.send_in(NO_CONN, {"jobs"}, set(), {})
    assert said(db)[0]["n"] == ["jobs"]  # chosen knowing: sent
    assert told(replicas) == []  # `before` may still commit, unheard
    replicas.settled(after)
    assert told(replicas) == []
    replicas.settled(before)
    assert told(replicas) == [{"o": "r1", "a": "r2", "v": 3}]


async def test_a_hello_is_answered_with_this_replicas_classes() -> None:
    db: dict[str, Any] = {}
    hub = Hub()
    replicas = await linked(hub, db)
    with hub.subscribe("worker:w_1"):
        told(replicas)
        replicas.heard(announcement("r2", hello=True))
        messages = told(replicas)
    assert {"o": "r1", "a": "r2", "v": 1} in messages
    assert [m["i"] for m in messages if "i" in m] == [["worker"]]


async def test_a_new_class_is_announced_and_its_streams_woken_by_each_answer() -> None:
    db: dict[str, Any] = {}
    hub = Hub()
    replicas = await linked(hub, db)
    told(replicas)
    with hub.subscribe("job:j_1") as sub, hub.subscribe("job:j_2") as other:
        (message,) = told(replicas)
        assert message["i"] == ["job"]
        with hub.subscribe("job:j_3"):
            assert told(replicas) == []  # the class was announced already
        replicas.heard(orjson.dumps({"o": "r2", "a": "r3", "v": message["v"]}).decode())
        assert not sub.event.is_set()  # an answer to another replica
        replicas.heard(orjson.dumps({"o": "r2", "a": "r1", "v": message["v"]}).decode())
        assert sub.event.is_set() and other.event.is_set()
        assert sub.take_handed() == ([], True)  # they read again what they wait on


async def test_the_link_sends_what_the_replica_has_to_say() -> None:
    db: dict[str, Any] = {}
    replicas = await linked(Hub(), db)
    hello = list(replicas.interest.outbox)
    speaking = asyncio.create_task(replicas.speak())
    await asyncio.sleep(0)
    speaking.cancel()
    assert db["sent"] == hello and replicas.interest.outbox == []


async def test_a_notification_that_fails_leaves_no_transaction_open() -> None:
    """Its transaction rolls back: an announcement heard meanwhile is answered all the same."""

    class Refusing(SharedLock):
        async def notify(self, conn: AsyncConnection, payloads: Any) -> None:
            raise ConnectionError("the database went away")

    db: dict[str, Any] = {}
    replicas = Replicas(Hub(), "r1", Refusing(db, "r1"))
    await replicas.listen()
    told(replicas)
    with pytest.raises(ConnectionError):
        await replicas.send_in(NO_CONN, set(), {"key:k_1"}, {})
    replicas.heard(announcement("r2", "jobs"))
    assert told(replicas) == [{"o": "r1", "a": "r2", "v": 1}]
