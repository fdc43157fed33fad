"""The audit log's HMAC chain against someone who can write the database but not the key.

Each attack of issue #14 (part 3) is played on the real app: entries deleted, unsealed,
edited, inserted back-dated, cut off the end; and many writers at once must still make one
unbroken chain.
"""

from __future__ import annotations

import asyncio
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager

from gpufleet.domain import audit_chain
from gpufleet.server.app import create_app
from gpufleet.server.services import audit
from gpufleet.store.queries import Queries
from gpufleet.store.tables import audit_events
from tests.api.conftest import Fleet, both_databases

# On PostgreSQL too (`both_databases`): the chain as it is sealed there (jsonb's key order,
# its timestamps), by writers the advisory lock orders, and the seal loop. The attacks are
# rows edited through SQL and read back by `verify`: the same on either database, run once.

postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


async def verify(fleet: Fleet) -> dict[str, Any]:
    answer = await fleet.admin.get("/api/audit/verify")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def stored(fleet: Fleet) -> list[sa.Row[Any]]:
    async with fleet.ctx.store.engine.connect() as conn:
        stmt = sa.select(audit_events).order_by(audit_events.c.id)
        return list(await conn.execute(stmt))


async def tamper(fleet: Fleet, *statements: sa.Executable) -> None:
    """Write the database directly, as someone holding its password but not the key."""
    async with fleet.ctx.store.engine.begin() as conn:
        for statement in statements:
            await conn.execute(statement)


async def some_activity(fleet: Fleet, workers: int = 3) -> None:
    for i in range(workers):
        await fleet.create_worker(f"gpu-{i}-{len(await stored(fleet))}")


async def run_with_loops(fleet: Fleet, seconds: float) -> None:
    """Stop the test's orchestrator and run one with its background loops for a while."""
    await fleet.stop()
    async with LifespanManager(create_app(fleet.settings)):
        await asyncio.sleep(seconds)  # deliberate: the callers check what the loops leave alone
    await fleet.start()


@both_databases
async def test_every_entry_is_sealed_by_the_transaction_that_writes_it(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await fleet.submit()
    await agent.next_offer()

    rows = await stored(fleet)  # no sweep has run
    assert [r.chain_seq for r in rows] == list(range(1, len(rows) + 1))
    result = await verify(fleet)
    assert result["ok"] is True
    assert result["checked"] == len(rows) == result["chain_head"]
    assert result["unsealed"] == 0 and result["gaps"] == [] and result["head_behind"] is False


async def test_an_edited_entry_breaks_the_chain_where_it_was(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await fleet.submit()
    await agent.next_offer()
    assert (await verify(fleet))["ok"] is True
    (victim,) = [r for r in await stored(fleet) if r.event_type == "job.submitted"]

    await tamper(
        fleet,
        sa.update(audit_events)
        .where(audit_events.c.id == victim.id)
        .values(actor="key:someone-else"),
    )

    broken = await verify(fleet)
    assert broken["ok"] is False
    assert broken["first_broken"]["seq"] == victim.chain_seq
    assert broken["first_broken"]["event_id"] == victim.id
    assert broken["checked"] == victim.chain_seq - 1


async def test_a_removed_entry_is_reported_as_a_gap(fleet: Fleet) -> None:
    await some_activity(fleet)
    await tamper(fleet, sa.delete(audit_events).where(audit_events.c.chain_seq == 2))

    result = await verify(fleet)
    assert result["ok"] is False
    assert result["gaps"] == [{"first": 2, "last": 2}] and result["missing"] == 1
    assert result["first_broken"] == {
        "seq": 2,
        "event_id": None,
        "reason": "entry 2 of the chain is missing",
    }


async def test_entries_deleted_edited_and_unsealed_from_there_on_are_never_chained_again(
    fleet: Fleet,
) -> None:
    await some_activity(fleet, workers=4)
    total = len(await stored(fleet))
    await tamper(
        fleet,
        sa.delete(audit_events).where(audit_events.c.chain_seq.in_([3, 4])),
        sa.update(audit_events).where(audit_events.c.chain_seq == 6).values(actor="key:other"),
        sa.update(audit_events)
        .where(audit_events.c.chain_seq > 4)
        .values(chain_seq=None, mac=None),
    )
    orphans = [r.id for r in await stored(fleet) if r.chain_seq is None]
    assert len(orphans) == total - 4

    await some_activity(fleet)  # the server writes on, sealing only its own entries
    await run_with_loops(fleet, 1.5)  # the old seal loop re-chained within a second
    await fleet.restart()

    assert [r.id for r in await stored(fleet) if r.chain_seq is None] == orphans
    result = await verify(fleet)
    assert result["ok"] is False
    assert result["unsealed"] == len(orphans)
    assert result["unsealed_ids"] == orphans[:20]


async def test_a_back_dated_unsealed_revocation_is_reported_and_never_sealed(
    fleet: Fleet,
) -> None:
    key = await fleet.mint_key("queue.read")
    forged = {
        "ts": fleet.clock.now - timedelta(days=3),
        "event_type": "apikey.revoked",
        "actor": "key:admin",
        "target": key["id"],
        "client_addr": "127.0.0.1",
        "detail": {},
    }
    await tamper(fleet, sa.insert(audit_events).values(**forged))
    (row,) = [r for r in await stored(fleet) if r.event_type == "apikey.revoked"]

    await run_with_loops(fleet, 1.5)
    await some_activity(fleet)

    (again,) = [r for r in await stored(fleet) if r.event_type == "apikey.revoked"]
    assert again.chain_seq is None and again.mac is None
    result = await verify(fleet)
    assert result["ok"] is False
    assert result["unsealed"] == 1 and result["unsealed_ids"] == [row.id]
    assert result["first_broken"] is None and result["gaps"] == []  # the chain itself holds


async def test_entries_cut_off_the_end_show_against_the_recorded_head(fleet: Fleet) -> None:
    await some_activity(fleet)
    assert await audit.record_head(fleet.ctx)  # the loop's step, once a second
    head = len(await stored(fleet))
    recorded = audit.recorded_head(fleet.settings.data_dir / "audit.head")
    assert recorded == fleet.ctx.audit_head.newest

    await tamper(fleet, sa.delete(audit_events).where(audit_events.c.chain_seq > head - 3))

    result = await verify(fleet)
    assert result["ok"] is False and result["head_behind"] is True
    assert result["recorded_head"] == head and result["chain_head"] == head - 3
    assert result["first_broken"] is None and result["gaps"] == [] and result["unsealed"] == 0


async def test_a_cut_chain_grown_again_past_the_record_still_shows(fleet: Fleet) -> None:
    await some_activity(fleet)
    await audit.record_head(fleet.ctx)
    head = len(await stored(fleet))
    await tamper(fleet, sa.delete(audit_events).where(audit_events.c.chain_seq > head - 2))

    await some_activity(fleet, workers=3)  # new entries take the cut positions and more
    assert not await audit.record_head(fleet.ctx)  # the evidence is kept
    await fleet.restart()

    result = await verify(fleet)
    assert result["chain_head"] > head and result["recorded_head"] == head
    assert result["ok"] is False and result["head_behind"] is True
    assert result["first_broken"] is None  # the new entries link onto the cut chain


@both_databases
async def test_concurrent_writers_make_one_unbroken_chain(fleet: Fleet) -> None:
    await asyncio.gather(*(fleet.create_worker(f"gpu-{i}") for i in range(25)))
    async with fleet.client() as anon:
        await asyncio.gather(
            *(anon.get("/api/queue", headers={"X-API-Key": f"gfk_wrong{i}"}) for i in range(10))
        )

    rows = await stored(fleet)
    assert sorted(r.chain_seq for r in rows) == list(range(1, len(rows) + 1))
    result = await verify(fleet)
    assert result["ok"] is True and result["checked"] == len(rows)


@postgres_only
async def test_two_replicas_writing_at_once_make_one_unbroken_chain(
    fleet: Fleet, tmp_path: Path, database_url: str
) -> None:
    other_dir = tmp_path / "replica" / "data"
    other_dir.mkdir(parents=True)
    for shared in ("admin.token", "audit.key"):
        shutil.copy2(fleet.settings.data_dir / shared, other_dir / shared)
    replica = await Fleet(tmp_path / "replica", database_url).start()
    try:
        await asyncio.gather(
            *((fleet if i % 2 else replica).create_worker(f"gpu-{i}") for i in range(30))
        )
        rows = await stored(fleet)
        assert sorted(r.chain_seq for r in rows) == list(range(1, len(rows) + 1))
        for either in (fleet, replica):
            assert await audit.record_head(either.ctx)
            result = await verify(either)
            assert result["ok"] is True and result["checked"] == len(rows)
    finally:
        await replica.stop()


@both_databases
async def test_entries_an_older_version_left_unsealed_are_sealed_once_and_said_so(
    fleet: Fleet,
) -> None:
    # What an older gpufleet leaves: entries its seal loop chained, then a few it had not yet.
    old = [
        {
            "ts": fleet.clock.now,
            "event_type": "worker.created",
            "actor": "key:admin",
            "target": f"w{i}",
            "client_addr": None,
            "detail": {"n": i},
        }
        for i in range(5)
    ]
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(sa.delete(audit_events))
        await conn.execute(sa.insert(audit_events), old)
        q = Queries(conn)
        sealed = await q.unsealed_audit(3)
        seals = audit_chain.extend(fleet.ctx.audit_key, audit_chain.START, sealed)
        await q.seal_audit([(e.id, s.seq, s.mac) for e, s in zip(sealed, seals, strict=True)])
    await fleet.stop()
    (fleet.settings.data_dir / "audit.head").unlink()  # an older version kept none
    await fleet.start()
    await fleet.restart()  # once: a second start seals nothing

    (upgraded,) = await fleet.audit(type=audit_chain.UPGRADED)
    assert upgraded["detail"] == {"legacy_sealed": 2}
    result = await verify(fleet)
    assert result["ok"] is True and result["unsealed"] == 0
    assert result["checked"] == len(await stored(fleet))


async def test_removing_the_upgrade_entry_does_not_get_unsealed_entries_sealed_at_start(
    fleet: Fleet,
) -> None:
    await some_activity(fleet)
    await tamper(
        fleet,
        sa.delete(audit_events).where(audit_events.c.event_type == audit_chain.UPGRADED),
        sa.update(audit_events).values(chain_seq=None, mac=None),
    )
    unsealed = len(await stored(fleet))

    await fleet.restart()

    assert await fleet.audit(type=audit_chain.UPGRADED) == []
    result = await verify(fleet)
    assert result["ok"] is False and result["unsealed"] == unsealed
    assert result["head_behind"] is True and result["chain_head"] == 0
