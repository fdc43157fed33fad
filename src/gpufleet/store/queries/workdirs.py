"""Who holds a workdir snapshot (domain/workdir_access.py): read at a submit, an upload and a
question about a digest; written once an upload's bytes are checked, and by a submit that
shares one with its job's team."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa

from gpufleet.domain.workdir_access import Holding
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import workdir_holders

_H = workdir_holders.c


class WorkdirQueries(QueryBase):
    async def workdir_holdings(self, digest: str) -> list[Holding]:
        """The holders of snapshot `digest` (its hex digits), and the teams it is shared with."""
        stmt = sa.select(_H.user_id, _H.team_id).where(_H.digest == digest).distinct()
        return [Holding(m["user_id"], m["team_id"]) for m in await self._mapped(stmt)]

    async def hold_workdir(
        self, digest: str, user_id: str, team_id: str | None, now: datetime
    ) -> bool:
        """Record that `user_id` holds `digest` (`team_id` None) or shared it with `team_id`;
        False when that was recorded already."""
        team = _H.team_id.is_(None) if team_id is None else _H.team_id == team_id
        seen = sa.select(_H.id).where(_H.digest == digest, _H.user_id == user_id, team)
        if await self._first(seen.limit(1)) is not None:
            return False
        await self.conn.execute(
            sa.insert(workdir_holders).values(
                digest=digest, user_id=user_id, team_id=team_id, held_at=now
            )
        )
        return True

    async def forget_workdirs(self, digests: Collection[str], before: datetime) -> int:
        """Forget who held the snapshots `digests` (deleted from the store) as of `before`: a
        holding recorded since came with an upload of its own."""
        stmt = sa.delete(workdir_holders).where(_H.digest.in_(sorted(digests)), _H.held_at < before)
        return await self._rowcount(stmt)
