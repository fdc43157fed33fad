"""A job's log lines and its progress history (domain.history)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.history import STEP_SERIES, Thinning
from gpufleet.domain.records import LogLine
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import job_logs, progress_points, progress_series

# job_logs.seq is a 32-bit integer on PostgreSQL: a cursor past it is compared here, since
# the driver refuses to send it.
LOG_SEQ_MAX = 2**31 - 1


class LogQueries(QueryBase):
    async def insert_logs(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            await self.conn.execute(sa.insert(job_logs), rows)

    async def read_logs(
        self,
        job_id: str,
        after: int,
        limit: int,
        *,
        before: int | None = None,
        attempt_id: str | None = None,
        max_bytes: int | None = None,
        q: str | None = None,
        node: int | None = None,
    ) -> tuple[list[LogLine], bool]:
        """Lines after `after`, oldest first; with `before`, the newest `limit` lines between
        the two (still oldest first); with `attempt_id`, that attempt's only; with `node`,
        that node's only; with `max_bytes`, only as many as hold that much text (at least
        one line); with `q`, only the lines holding it (`log_scope`). And whether lines were
        left out in the direction read (after the page reading on, before it
        reading back)."""
        if after >= LOG_SEQ_MAX:
            return [], False
        where = [*log_scope(job_id, attempt_id, q, node), job_logs.c.seq > after]
        order: sa.ColumnElement[Any] = job_logs.c.seq
        if before is not None:
            if before <= LOG_SEQ_MAX:  # a cursor past every seq bounds nothing
                where.append(job_logs.c.seq < before)
            order = job_logs.c.seq.desc()
        if max_bytes is None:  # one line more than asked tells whether the page is the last
            count = limit + 1
        else:
            count, more = await self._fitting(where, order, limit, max_bytes)
        stmt = sa.select(job_logs).where(*where).order_by(order).limit(count)
        rows = list(await self.conn.execute(stmt))
        if max_bytes is None:
            more = len(rows) > limit
            rows = rows[:limit]
        if before is not None:
            rows.reverse()
        lines = [
            LogLine(
                seq=r.seq,
                attempt_id=r.attempt_id,
                stream=r.stream,
                text=r.text,
                ts=r.ts,
                node=r.node,
            )
            for r in rows
        ]
        return lines, more

    async def _fitting(
        self,
        where: list[sa.ColumnElement[bool]],
        order: sa.ColumnElement[Any],
        limit: int,
        max_bytes: int,
    ) -> tuple[int, bool]:
        """How many of the lines in this order to read (at most `limit`, at least one, their
        text within `max_bytes`), and whether any were left out. Reads sizes, not text: a
        page of 64 KiB lines is never held whole to be cut."""
        text = job_logs.c.text
        # SQLite before 3.43 has no octet_length: the length of the text's bytes instead.
        size = (
            sa.func.octet_length(text)
            if self._pg
            else sa.func.length(sa.cast(text, sa.LargeBinary))
        )
        stmt = sa.select(size).where(*where).order_by(order).limit(limit + 1)
        sizes = [int(r[0] or 0) for r in await self.conn.execute(stmt)]
        count = total = 0
        for n in sizes[:limit]:
            total += n
            if count and total > max_bytes:
                break
            count += 1
        return count, count < len(sizes)

    async def log_tail_cursor(
        self,
        job_id: str,
        count: int,
        attempt_id: str | None = None,
        q: str | None = None,
        node: int | None = None,
    ) -> int:
        """The cursor after which the last `count` lines begin (0: the log is no longer)."""
        stmt = (
            sa.select(job_logs.c.seq)
            .where(*log_scope(job_id, attempt_id, q, node))
            .order_by(job_logs.c.seq.desc())
            .offset(count)
            .limit(1)
        )
        return int((await self.conn.execute(stmt)).scalar_one_or_none() or 0)

    async def first_log_seq(
        self,
        job_id: str,
        attempt_id: str | None = None,
        q: str | None = None,
        node: int | None = None,
    ) -> int | None:
        stmt = sa.select(sa.func.min(job_logs.c.seq)).where(*log_scope(job_id, attempt_id, q, node))
        first = (await self.conn.execute(stmt)).scalar_one_or_none()
        return None if first is None else int(first)

    async def count_logs(self, attempt_id: str, node: int = 0) -> int:
        """The lines one node of the attempt sent (each node counts its own: `first`)."""
        stmt = (
            sa.select(sa.func.count())
            .select_from(job_logs)
            .where(job_logs.c.attempt_id == attempt_id, job_logs.c.node == node)
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def last_log_lines(
        self, attempt_id: str, count: int, node: int | None = None
    ) -> list[str]:
        where = [job_logs.c.attempt_id == attempt_id]
        if node is not None:
            where.append(job_logs.c.node == node)
        stmt = sa.select(job_logs.c.text).where(*where).order_by(job_logs.c.seq.desc()).limit(count)
        return [r.text for r in await self.conn.execute(stmt)][::-1]

    async def progress_counts(self, job_id: str) -> dict[str, int]:
        """Each of the job's series and how many points it was sent."""
        t = progress_series
        stmt = sa.select(t.c.series, t.c.received).where(t.c.job_id == job_id)
        return {r.series: r.received for r in await self.conn.execute(stmt)}

    async def add_progress(
        self,
        job_id: str,
        counts: dict[str, int],
        added: dict[str, int],
        points: list[dict[str, Any]],
    ) -> None:
        """Store points and the series' new counts (`counts`: series → received before;
        `added`: series → points added now)."""
        t = progress_series
        grown: dict[int, list[str]] = {}  # series grown alike share one statement
        for name, n in counts.items():
            if n > 0:
                grown.setdefault(added[name], []).append(name)
        for by, old in grown.items():
            await self.conn.execute(
                sa.update(t)
                .where(t.c.job_id == job_id, t.c.series.in_(old))
                .values(received=t.c.received + by)
            )
        new = [
            {"job_id": job_id, "series": s, "received": added[s]}
            for s, n in counts.items()
            if n == 0
        ]
        if new:
            await self.conn.execute(sa.insert(t), new)
        await self.conn.execute(sa.insert(progress_points), points)

    async def thin_progress(self, job_id: str, series: list[str], plan: Thinning) -> None:
        p = progress_points
        await self.conn.execute(
            sa.delete(p).where(
                p.c.job_id == job_id,
                p.c.series.in_(series),
                p.c.ordinal >= plan.start,
                p.c.ordinal < plan.stop,
                p.c.ordinal % plan.stride != 0,
            )
        )

    async def progress_values(self, job_id: str) -> list[tuple[str, int, float, int]]:
        """The metric series' kept points: (series, step, value, attempt), oldest first.
        Without their times: parsing 16,000 of them is most of the read on SQLite."""
        p = progress_points
        stmt = (
            sa.select(p.c.series, p.c.step, p.c.value, p.c.attempt)
            .where(p.c.job_id == job_id, p.c.series != STEP_SERIES)
            .order_by(p.c.series, p.c.ordinal)
        )
        return [(r.series, r.step, r.value, r.attempt) for r in await self.conn.execute(stmt)]

    async def progress_steps(self, job_id: str) -> list[tuple[datetime, int, int]]:
        """The step series' kept points: (time, step, attempt), oldest first."""
        p = progress_points
        stmt = (
            sa.select(p.c.ts, p.c.step, p.c.attempt)
            .where(p.c.job_id == job_id, p.c.series == STEP_SERIES)
            .order_by(p.c.ordinal)
        )
        return [(r.ts, r.step, r.attempt) for r in await self.conn.execute(stmt)]


def log_scope(
    job_id: str, attempt_id: str | None, q: str | None = None, node: int | None = None
) -> list[sa.ColumnElement[bool]]:
    """The job's lines; one attempt's; one node's; those holding `q`, as typed (`%`, `_` and
    the escape character match themselves), ignoring case (ASCII letters on SQLite)."""
    scope = [job_logs.c.job_id == job_id]
    if attempt_id is not None:
        scope.append(job_logs.c.attempt_id == attempt_id)
    if node is not None:
        scope.append(job_logs.c.node == node)
    if q:
        scope.append(job_logs.c.text.icontains(q, autoescape=True))
    return scope
