"""Users, teams and who is in which (docs/scheduling.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import Team, UsageSample, User
from gpufleet.domain.states import PLACED_JOB, WAITING_JOB
from gpufleet.store.direct import Direct, by_table
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import Prebuilt, QueryBase, by
from gpufleet.store.tables import (
    api_keys,
    configs,
    job_secrets,
    jobs,
    team_members,
    teams,
    usage_samples,
    users,
)

USAGE_SAMPLES_MAX = 10_000  # the newest, at most, for one chart


def _by_ref(table: sa.Table, ref: str) -> sa.Select[Any]:
    """The row whose id is `ref`, else whose name is: an id wins over a name."""
    return (
        sa.select(table)
        .where(sa.or_(table.c.id == ref, table.c.name == ref))
        .order_by(sa.case((table.c.id == ref, 0), else_=1))
        .limit(1)
    )


_USER = Prebuilt(sa.select(users).where(users.c.id == by("id")))
_TEAMS_OF = Prebuilt(
    sa.select(teams)
    .join(team_members, team_members.c.team_id == teams.c.id)
    .where(team_members.c.user_id == by("user"))
    .order_by(teams.c.name)
)
# A user and their teams in one statement (a submit's): the user's row once a team, or once
# alone with no team.
_USER_AND_TEAMS = (
    sa.select(users, teams)
    .select_from(
        users.outerjoin(team_members, team_members.c.user_id == users.c.id).outerjoin(
            teams, teams.c.id == team_members.c.team_id
        )
    )
    .where(users.c.id == by("id"))
    .order_by(teams.c.name)
)
_USER_AND_TEAMS_DIRECT = Direct(_USER_AND_TEAMS)  # every submit's
_TEAM_IDS_OF = Prebuilt(
    sa.select(team_members.c.team_id).where(team_members.c.user_id == by("user"))
)


class PeopleQueries(QueryBase):
    # ---- users ------------------------------------------------------------------------

    async def insert_user(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(users).values(**values))

    async def ensure_user(self, values: Mapping[str, Any]) -> None:
        """Insert the user unless one with its id exists (the built-in admin at start)."""
        found = await self._first(sa.select(users.c.id).where(users.c.id == values["id"]))
        if found is None:
            await self.insert_user(values)

    async def get_user(self, user_id: str, *, lock: bool = False) -> User | None:
        row = await self._first(self._either(_USER, lock), {"id": user_id})
        return rows.user(row) if row else None

    async def user_by_ref(self, ref: str, *, lock: bool = False) -> User | None:
        """The user whose id, else whose name, is `ref`."""
        stmt = _by_ref(users, ref)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return rows.user(row) if row else None

    async def list_users(self) -> list[User]:
        stmt = sa.select(users).order_by(users.c.name)
        return [rows.user(m) for m in await self._mapped(stmt)]

    async def user_name_taken(self, name: str) -> bool:
        stmt = sa.select(sa.func.count()).select_from(users).where(users.c.name == name)
        return int((await self.conn.execute(stmt)).scalar_one()) > 0

    async def update_user(self, user_id: str, **values: Any) -> None:
        await self.conn.execute(sa.update(users).where(users.c.id == user_id).values(**values))

    async def delete_user(self, user_id: str) -> None:
        await self.conn.execute(
            sa.delete(job_secrets).where(
                job_secrets.c.scope == "user", job_secrets.c.owner_id == user_id
            )
        )
        await self.conn.execute(sa.delete(team_members).where(team_members.c.user_id == user_id))
        await self.conn.execute(sa.delete(users).where(users.c.id == user_id))

    async def user_names(self, user_ids: Iterable[str]) -> dict[str, str]:
        stmt = sa.select(users.c.id, users.c.name).where(users.c.id.in_(set(user_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}

    async def active_key_ids(self, user_id: str) -> list[str]:
        stmt = sa.select(api_keys.c.id).where(
            api_keys.c.user_id == user_id, api_keys.c.revoked_at.is_(None)
        )
        return [r.id for r in await self.conn.execute(stmt)]

    async def revoke_user_keys(self, user_id: str, now: datetime) -> None:
        await self.conn.execute(
            sa.update(api_keys)
            .where(api_keys.c.user_id == user_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def active_keys_by_user(self) -> dict[str, int]:
        stmt = (
            sa.select(api_keys.c.user_id, sa.func.count().label("n"))
            .where(api_keys.c.revoked_at.is_(None), api_keys.c.user_id.is_not(None))
            .group_by(api_keys.c.user_id)
        )
        return {r.user_id: int(r.n) for r in await self.conn.execute(stmt)}

    # ---- teams ------------------------------------------------------------------------

    async def insert_team(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(teams).values(**values))

    async def get_team(self, team_id: str) -> Team | None:
        row = await self._first(sa.select(teams).where(teams.c.id == team_id))
        return rows.team(row) if row else None

    async def team_by_ref(self, ref: str, *, lock: bool = False) -> Team | None:
        """The team whose id, else whose name, is `ref`."""
        stmt = _by_ref(teams, ref)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return rows.team(row) if row else None

    async def list_teams(self) -> list[Team]:
        stmt = sa.select(teams).order_by(teams.c.name)
        return [rows.team(m) for m in await self._mapped(stmt)]

    async def team_name_taken(self, name: str) -> bool:
        stmt = sa.select(sa.func.count()).select_from(teams).where(teams.c.name == name)
        return int((await self.conn.execute(stmt)).scalar_one()) > 0

    async def update_team(self, team_id: str, **values: Any) -> None:
        await self.conn.execute(sa.update(teams).where(teams.c.id == team_id).values(**values))

    async def delete_team(self, team_id: str) -> None:
        """The team, its memberships, its place as anyone's default team, and the stored
        configs shared with it (they stay, shared with none)."""
        await self.conn.execute(
            sa.update(users).where(users.c.default_team_id == team_id).values(default_team_id=None)
        )
        await self.conn.execute(
            sa.update(configs).where(configs.c.team_id == team_id).values(team_id=None)
        )
        await self.conn.execute(sa.delete(team_members).where(team_members.c.team_id == team_id))
        await self.conn.execute(
            sa.delete(job_secrets).where(
                job_secrets.c.scope == "team", job_secrets.c.owner_id == team_id
            )
        )
        await self.conn.execute(sa.delete(teams).where(teams.c.id == team_id))

    async def unfinished_jobs_of_team(self, team_id: str) -> int:
        """Its jobs waiting or on a worker: what deleting the team would orphan."""
        live = [s.value for s in WAITING_JOB | PLACED_JOB]
        stmt = (
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.team_id == team_id, jobs.c.status.in_(live))
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def usage_samples(self, team_id: str, since: datetime) -> list[UsageSample]:
        newest = (
            sa.select(usage_samples)
            .where(usage_samples.c.team_id == team_id, usage_samples.c.at >= since)
            .order_by(usage_samples.c.at.desc())
            .limit(USAGE_SAMPLES_MAX)
        )
        found = [rows.usage_sample(m) for m in await self._mapped(newest)]
        return found[::-1]

    # ---- members ----------------------------------------------------------------------

    async def add_member(self, team_id: str, user_id: str) -> bool:
        """True when the user was not in the team before."""
        stmt = sa.select(team_members.c.user_id).where(
            team_members.c.team_id == team_id, team_members.c.user_id == user_id
        )
        if await self._first(stmt) is not None:
            return False
        await self.conn.execute(
            sa.insert(team_members).values(team_id=team_id, user_id=user_id, usage=0.0)
        )
        return True

    async def remove_member(self, team_id: str, user_id: str) -> bool:
        """True when the user was in the team; their default team is cleared if it was it."""
        removed = await self._rowcount(
            sa.delete(team_members).where(
                team_members.c.team_id == team_id, team_members.c.user_id == user_id
            )
        )
        await self.conn.execute(
            sa.update(users)
            .where(users.c.id == user_id, users.c.default_team_id == team_id)
            .values(default_team_id=None)
        )
        return removed == 1

    async def teams_of(self, user_id: str) -> list[Team]:
        return [rows.team(m) for m in await self._mapped(_TEAMS_OF.plain, {"user": user_id})]

    async def user_and_teams(self, user_id: str) -> tuple[User, list[Team]] | None:
        """`get_user` and `teams_of` in one statement; None: no such user."""
        found = await _USER_AND_TEAMS_DIRECT.rows(self.conn, {"id": user_id})
        if not found:
            return None
        parts = [by_table(row, users, teams) for row in found]
        # A team of none (the outer join's): the user is in no team.
        theirs = [rows.team(team) for _, team in parts if team["id"] is not None]
        return rows.user(parts[0][0]), theirs

    async def team_ids_of(self, user_id: str) -> frozenset[str]:
        """The ids of the user's teams (who may act on a job: `domain.ownership`)."""
        found = await self.conn.execute(_TEAM_IDS_OF.plain, {"user": user_id})
        return frozenset(found.scalars())
