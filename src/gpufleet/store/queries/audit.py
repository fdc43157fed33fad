"""The audit log and its chain (domain/audit_chain.py)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gpufleet.domain.audit_chain import START, Head
from gpufleet.domain.filters import AuditFilter
from gpufleet.domain.records import AuditEvent
from gpufleet.store import locks
from gpufleet.store.direct import Direct, DirectInsert, by_table
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import Prebuilt, QueryBase
from gpufleet.store.tables import audit_events

_CHAIN_HEAD = Prebuilt(
    sa.select(audit_events.c.chain_seq, audit_events.c.mac)
    .where(audit_events.c.chain_seq.is_not(None))
    .order_by(audit_events.c.chain_seq.desc())
    .limit(1)
)


# The chain's end before an INSERT's rows, returned with each of them: the head read in
# the INSERT's own statement (its snapshot follows the lock taken before it on PostgreSQL,
# and the rows it writes are unsealed, so they are not the head).
_HEAD_SEQ = _CHAIN_HEAD.plain.with_only_columns(audit_events.c.chain_seq).scalar_subquery()
_HEAD_MAC = _CHAIN_HEAD.plain.with_only_columns(audit_events.c.mac).scalar_subquery()
_INSERT = sa.insert(audit_events).returning(
    *audit_events.c, _HEAD_SEQ.label("head_seq"), _HEAD_MAC.label("head_mac")
)
_INSERT_PG = sa.insert(audit_events).returning(
    *audit_events.c,
    _HEAD_SEQ.label("head_seq"),
    _HEAD_MAC.label("head_mac"),
    sort_by_parameter_order=True,
)

# The same INSERT sent on the driver connection (store/direct.py), up to 16 rows: they are
# sorted by id on both databases (each row of one INSERT is numbered in the order of its
# VALUES, and the chain's lock, or SQLite's one writer, lets no other INSERT between).
_DIRECT_INSERT = DirectInsert(
    audit_events, *audit_events.c, _HEAD_SEQ.label("head_seq"), _HEAD_MAC.label("head_mac")
)

_SEAL = Direct(  # built once (`Prebuilt`'s reasoning): every audited write seals
    sa.update(audit_events)
    .where(audit_events.c.id == sa.bindparam("event_id"))
    .values(chain_seq=sa.bindparam("seq"), mac=sa.bindparam("mac_"))
)


class AuditQueries(QueryBase):
    async def insert_audit(self, entries: list[dict[str, Any]]) -> tuple[list[AuditEvent], Head]:
        """Audit events in order, one statement for all; returned as stored (ids given, the
        detail as the database keeps it), which is what their MACs must cover, with the
        chain's end they follow (read by the same statement: a statement fewer a write).

        On SQLite, SQLAlchemy cannot promise RETURNING's order for a many-row INSERT and so
        writes one row a statement when asked to; but SQLite numbers the rows of one INSERT
        in the order of its VALUES (one writer, each row the largest id plus one), so the
        rows are put back in order by id. So are PostgreSQL's when sent direct (up to 16
        rows: its sequence numbers one INSERT's rows in order, under the chain's lock);
        through SQLAlchemy PostgreSQL keeps their order itself."""
        direct = await _DIRECT_INSERT.rows(self.conn, entries)
        if direct is not None:
            stored = [rows.audit_event(by_table(r, audit_events)[0]) for r in direct]
            seq, mac = direct[0][-2:]  # the head's columns, after the event's
        else:
            mapped = await self._mapped(_INSERT_PG if self._pg else _INSERT, entries)
            stored = [rows.audit_event(m) for m in mapped]
            seq, mac = mapped[0]["head_seq"], mapped[0]["head_mac"]
        head = Head(int(seq), str(mac)) if seq is not None else START
        return (stored if self._pg and direct is None else sorted(stored, key=lambda e: e.id)), head

    async def lock_audit_chain(self) -> None:
        """One appender to the chain at a time, until commit, across orchestrators
        (PostgreSQL; SQLite has one writer). Taken last in a transaction, so held briefly."""
        if self._pg:
            await locks.hold_until_commit(self.conn, locks.AUDIT_CHAIN)

    async def audit_chain_head(self) -> Head | None:
        row = await self._first(_CHAIN_HEAD.plain)
        return Head(int(row.chain_seq), str(row.mac)) if row else None

    async def audit_mac_at(self, seq: int) -> str | None:
        stmt = sa.select(audit_events.c.mac).where(audit_events.c.chain_seq == seq)
        mac = (await self.conn.execute(stmt)).scalar_one_or_none()
        return str(mac) if mac is not None else None

    async def audit_event_exists(self, event_type: str) -> bool:
        stmt = sa.select(audit_events.c.id).where(audit_events.c.event_type == event_type)
        return (await self.conn.execute(stmt.limit(1))).first() is not None

    async def unsealed_audit(self, limit: int) -> list[AuditEvent]:
        stmt = (
            sa.select(audit_events)
            .where(audit_events.c.chain_seq.is_(None))
            .order_by(audit_events.c.id)
            .limit(limit)
        )
        return [rows.audit_event(m) for m in await self._mapped(stmt)]

    async def seal_audit(self, seals: list[tuple[int, int, str]]) -> None:
        """Seal entries: (event id, chain position, MAC) each, in one executemany."""
        if not seals:
            return
        await _SEAL.many(
            self.conn, [{"event_id": i, "seq": seq, "mac_": mac} for i, seq, mac in seals]
        )

    async def audit_chain(self, after_seq: int, limit: int) -> list[tuple[int, str, AuditEvent]]:
        stmt = (
            sa.select(audit_events)
            .where(audit_events.c.chain_seq > after_seq)
            .order_by(audit_events.c.chain_seq)
            .limit(limit)
        )
        return [
            (int(m["chain_seq"]), str(m["mac"]), rows.audit_event(m))
            for m in await self._mapped(stmt)
        ]

    async def count_unsealed_audit(self) -> int:
        stmt = (
            sa.select(sa.func.count())
            .select_from(audit_events)
            .where(audit_events.c.chain_seq.is_(None))
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def audit_type_exists(self, event_type: str) -> bool:
        """Whether the log holds this type (or, for a prefix ending in '.', one under it)."""
        col = audit_events.c.event_type
        cond = (
            col.startswith(event_type, autoescape=True)
            if event_type.endswith(".")
            else (col == event_type)
        )
        stmt = sa.select(sa.literal(1)).select_from(audit_events).where(cond).limit(1)
        return (await self.conn.execute(stmt)).first() is not None

    async def list_audit(
        self, f: AuditFilter, limit: int, offset: int
    ) -> tuple[list[AuditEvent], int]:
        conds: list[sa.ColumnElement[bool]] = []
        if f.event_type:
            if f.event_type.endswith("."):
                conds.append(audit_events.c.event_type.startswith(f.event_type, autoescape=True))
            else:
                conds.append(audit_events.c.event_type == f.event_type)
        if f.actor:
            conds.append(audit_events.c.actor == f.actor)
        if f.actors is not None:
            conds.append(audit_events.c.actor.in_(f.actors))
        if f.target:
            conds.append(audit_events.c.target == f.target)
        if f.since:
            conds.append(audit_events.c.ts >= f.since)
        if f.until:
            conds.append(audit_events.c.ts < f.until)
        stmt = (
            sa.select(audit_events)
            .where(*conds)
            .order_by(audit_events.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        total_stmt = sa.select(sa.func.count()).select_from(audit_events).where(*conds)
        events = [rows.audit_event(m) for m in await self._mapped(stmt)]
        return events, int((await self.conn.execute(total_stmt)).scalar_one())
