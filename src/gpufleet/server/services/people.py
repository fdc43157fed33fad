"""Users and teams as admins manage them, and the team a submitter's job is for.

Every change is audited (`user.*`, `team.*`); the rules on names, weights, limits and the
built-in admin are `domain/people.py`'s."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.domain import people as rules
from gpufleet.domain.fair_share import fair_share_factor, share_gpus
from gpufleet.domain.levels import Level
from gpufleet.domain.policy import NOTHING
from gpufleet.domain.records import Team, UsageSample, User
from gpufleet.domain.secrets import new_id
from gpufleet.errors import Conflict, InvalidInput, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import TEAMS_TOPIC, key_topic
from gpufleet.server.services import standing
from gpufleet.server.services.capacity import all_costs
from gpufleet.store import Queries

USAGE_WINDOW = timedelta(days=1)  # a team's usage chart, unless `since` says otherwise
USER_LIMITS = ("max_gpus", "max_jobs", "max_queued")
TEAM_LIMITS = ("max_gpus", "max_jobs")


@dataclass(frozen=True, slots=True)
class UserView:
    """A user as the API shows it: its teams and default team by name, its active keys."""

    user: User
    teams: list[str]
    default_team: str | None
    keys: int


@dataclass(frozen=True, slots=True)
class TeamView:
    team: Team
    members: list[str]
    running_jobs: int  # offered or running now
    running_gpus: int
    share_gpus: float | None = None  # the policy's, once it computes them
    fair_share_factor: float | None = None
    cost: float = 0.0  # its jobs' share of the pools' cost to date (services/capacity.py)


def _no_user(ref: str) -> NotFound:
    return NotFound(
        f"no user {ref[:80]!r}; list users with GET /api/users",
        ui=f"no user {ref[:80]!r}; the Teams page lists the users",
        cli=f"no user {ref[:80]!r}; list them with `gpufleet users list`",
    )


def _no_team(ref: str) -> NotFound:
    return NotFound(
        f"no team {ref[:80]!r}; list teams with GET /api/teams",
        ui=f"no team {ref[:80]!r}; the Teams page lists the teams",
        cli=f"no team {ref[:80]!r}; list them with `gpufleet teams list`",
    )


async def _user(q: Queries, ref: str, *, lock: bool = False) -> User:
    user = await q.user_by_ref(ref, lock=lock)
    if user is None:
        raise _no_user(ref)
    return user


async def _team(q: Queries, ref: str, *, lock: bool = False) -> Team:
    team = await q.team_by_ref(ref, lock=lock)
    if team is None:
        raise _no_team(ref)
    return team


# ---- views ------------------------------------------------------------------------------


async def _user_views(q: Queries, only: list[User]) -> list[UserView]:
    team_names = {t.id: t.name for t in await q.list_teams()}
    teams_by_user: dict[str, list[str]] = {}
    for m in await q.all_members():
        teams_by_user.setdefault(m.user_id, []).append(team_names[m.team_id])
    keys = await q.active_keys_by_user()
    return [
        UserView(
            user=u,
            teams=sorted(teams_by_user.get(u.id, [])),
            default_team=team_names.get(u.default_team_id or ""),
            keys=keys.get(u.id, 0),
        )
        for u in only
    ]


async def _team_views(q: Queries, only: list[Team], now: datetime) -> list[TeamView]:
    """Teams as they stand: members, what runs, and their share and fair-share factor as
    the policy sees them now (`standing.snapshot`, the dispatch's own view)."""
    snap = await standing.snapshot(q, now)
    spent = (await all_costs(q, now)).teams
    names = {u.id: u.name for u in snap.users.values()}
    members: dict[str, list[str]] = {}
    for team_id, user_id in snap.member_usage:
        members.setdefault(team_id, []).append(names[user_id])
    views = []
    for t in only:
        running = snap.by_team.get(t.id, NOTHING)
        views.append(
            TeamView(
                team=t,
                members=sorted(members.get(t.id, [])),
                running_jobs=running.jobs,
                running_gpus=running.gpus,
                share_gpus=round(share_gpus(t.id, snap), 3),
                fair_share_factor=round(fair_share_factor(t.id, snap), 4),
                cost=spent.get(t.id, 0.0),
            )
        )
    return views


async def list_users(ctx: Context) -> list[UserView]:
    async with ctx.store.read() as q:
        return await _user_views(q, await q.list_users())


async def get_user(ctx: Context, ref: str) -> UserView:
    async with ctx.store.read() as q:
        (view,) = await _user_views(q, [await _user(q, ref)])
        return view


async def list_teams(ctx: Context) -> list[TeamView]:
    async with ctx.store.read() as q:
        return await _team_views(q, await q.list_teams(), ctx.clock())


async def get_team(ctx: Context, ref: str) -> TeamView:
    async with ctx.store.read() as q:
        (view,) = await _team_views(q, [await _team(q, ref)], ctx.clock())
        return view


async def team_usage(ctx: Context, ref: str, since: datetime | None) -> list[UsageSample]:
    async with ctx.store.read() as q:
        team = await _team(q, ref)
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)  # a time without a zone is UTC, as elsewhere
        return await q.usage_samples(team.id, since or ctx.clock() - USAGE_WINDOW)


# ---- users ------------------------------------------------------------------------------


def _limits(fields: tuple[str, ...], values: Mapping[str, Any]) -> dict[str, int | None]:
    return {f: rules.check_limit(f, values[f]) for f in fields if f in values}


async def create_user(
    ctx: Context,
    name: str,
    level: Level,
    team: str | None,
    limits: Mapping[str, int | None],
    actor: str,
    client: str | None,
    *,
    service: bool = False,
) -> UserView:
    """A new user; with `team`, in that team, which becomes their default."""
    rules.check_name("user", name)
    checked: dict[str, Any] = {**_limits(USER_LIMITS, limits), "service": service}
    async with _changing(ctx) as tx:
        await _name_free(tx.q, "user", name)
        joined = await _team(tx.q, team) if team is not None else None
        user_id = new_id("u")
        await tx.q.insert_user(
            {
                "id": user_id,
                "name": name,
                "level": Level(level).value,
                "default_team_id": joined.id if joined else None,
                "usage": 0.0,
                "created_at": tx.now,
                **checked,
            }
        )
        tx.audit(
            "user.created", actor, user_id, client, name=name, level=Level(level).value, **checked
        )
        if joined is not None:
            await tx.q.add_member(joined.id, user_id)
            tx.audit("team.member_added", actor, joined.id, client, team=joined.name, user=name)
        (view,) = await _user_views(tx.q, [await _user(tx.q, user_id)])
        return view


@contextlib.asynccontextmanager
async def _changing(ctx: Context) -> AsyncIterator[Tx]:
    """A write transaction on users or teams: live views re-read them once it commits."""
    async with transaction(ctx) as tx:
        tx.wake(TEAMS_TOPIC)
        yield tx


async def _name_free(q: Queries, kind: str, name: str) -> None:
    """Conflict unless no user (`kind` "user") or team ("team") is named `name`."""
    taken = q.user_name_taken if kind == "user" else q.team_name_taken
    if await taken(name):
        raise Conflict(f"a {kind} named {name!r} exists already; choose another name")


async def _renamed(
    q: Queries, kind: str, current: str, changes: Mapping[str, Any]
) -> dict[str, str]:
    """{"name": the new name} when `changes` renames the user or team named `current`."""
    if "name" not in changes or changes["name"] == current:
        return {}
    name = rules.check_name(kind, changes["name"])
    await _name_free(q, kind, name)
    return {"name": name}


def _updated(was: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """An `*.updated` audit row's detail: the name, what changed, and a rename's old name."""
    return {"name": was, **values, **({"renamed_from": was} if "name" in values else {})}


async def update_user(
    ctx: Context,
    ref: str,
    changes: Mapping[str, Any],
    actor: str,
    caller_user_id: str,
    client: str | None,
) -> UserView:
    """Change a user's `name`, `level`, `default_team` (a team of theirs, or None) or limits;
    a key absent from `changes` stays as it is."""
    values: dict[str, Any] = _limits(USER_LIMITS, changes)
    async with _changing(ctx) as tx:
        user = await _user(tx.q, ref, lock=True)
        values.update(await _renamed(tx.q, "user", user.name, changes))
        if "level" in changes:
            level = Level(changes["level"])
            rules.check_level_change(user, level, caller_user_id)
            values["level"] = level.value
        if "default_team" in changes:
            values["default_team_id"] = await _default_team(tx.q, user, changes["default_team"])
        if values:
            await tx.q.update_user(user.id, **values)
            tx.audit("user.updated", actor, user.id, client, **_updated(user.name, values))
        (view,) = await _user_views(tx.q, [await _user(tx.q, user.id)])
        return view


async def _default_team(q: Queries, user: User, ref: str | None) -> str | None:
    if ref is None:
        return None
    team = await _team(q, ref)
    if all(t.id != team.id for t in await q.teams_of(user.id)):
        raise InvalidInput(
            f"{user.name} is not in team {team.name}, so it cannot be their default team; "
            f"add them first with PUT /api/teams/{team.name}/members/{user.name}",
            cli=f"{user.name} is not in team {team.name}, so it cannot be their default team; "
            f"add them first: gpufleet teams add {team.name} {user.name}",
        )
    return team.id


async def delete_user(
    ctx: Context, ref: str, actor: str, caller_user_id: str, client: str | None
) -> None:
    """Delete the user, leave their teams, and revoke their keys (their streams end)."""
    async with _changing(ctx) as tx:
        user = await _user(tx.q, ref, lock=True)
        rules.check_user_deletable(user, caller_user_id)
        keys = await tx.q.active_key_ids(user.id)
        await tx.q.revoke_user_keys(user.id, tx.now)
        for key_id in keys:
            tx.audit("apikey.revoked", actor, key_id, client, reason=f"user {user.name} deleted")
            tx.end_streams(key_topic(key_id))
        await tx.q.delete_user(user.id)
        tx.audit("user.deleted", actor, user.id, client, name=user.name, keys_revoked=len(keys))


# ---- teams ------------------------------------------------------------------------------


def _team_values(changes: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = _limits(TEAM_LIMITS, changes)
    if "weight" in changes:
        values["weight"] = rules.check_weight(changes["weight"])
    for flag in ("preemptible", "can_preempt"):
        if flag in changes:
            if not isinstance(changes[flag], bool):
                raise InvalidInput(f"{flag} must be true or false, got {changes[flag]!r}")
            values[flag] = changes[flag]
    return values


async def create_team(
    ctx: Context, name: str, settings: Mapping[str, Any], actor: str, client: str | None
) -> TeamView:
    rules.check_name("team", name)
    values = {"weight": 1.0, "preemptible": False, "can_preempt": False, **_team_values(settings)}
    async with _changing(ctx) as tx:
        await _name_free(tx.q, "team", name)
        team_id = new_id("t")
        await tx.q.insert_team(
            {"id": team_id, "name": name, "usage": 0.0, "created_at": tx.now, **values}
        )
        tx.audit("team.created", actor, team_id, client, name=name, **values)
        return await _one_team(tx, team_id)


async def _one_team(tx: Tx, team_id: str) -> TeamView:
    (view,) = await _team_views(tx.q, [await _team(tx.q, team_id)], tx.now)
    return view


async def update_team(
    ctx: Context, ref: str, changes: Mapping[str, Any], actor: str, client: str | None
) -> TeamView:
    values = _team_values(changes)
    async with _changing(ctx) as tx:
        team = await _team(tx.q, ref, lock=True)
        values.update(await _renamed(tx.q, "team", team.name, changes))
        if values:
            await tx.q.update_team(team.id, **values)
            tx.audit("team.updated", actor, team.id, client, **_updated(team.name, values))
        return await _one_team(tx, team.id)


async def delete_team(ctx: Context, ref: str, actor: str, client: str | None) -> None:
    async with _changing(ctx) as tx:
        team = await _team(tx.q, ref, lock=True)
        live = await tx.q.unfinished_jobs_of_team(team.id)
        if live:
            raise Conflict(
                f"team {team.name} has {live} job{'s' if live != 1 else ''} queued, waiting "
                "for approval or running; cancel them or let them end, then delete the team",
            )
        await tx.q.delete_team(team.id)
        tx.audit("team.deleted", actor, team.id, client, name=team.name)


async def add_member(
    ctx: Context, team_ref: str, user_ref: str, actor: str, client: str | None
) -> TeamView:
    """Put the user in the team; already in it, nothing changes."""
    async with _changing(ctx) as tx:
        team = await _team(tx.q, team_ref, lock=True)
        user = await _user(tx.q, user_ref)
        if await tx.q.add_member(team.id, user.id):
            tx.audit("team.member_added", actor, team.id, client, team=team.name, user=user.name)
        return await _one_team(tx, team.id)


async def remove_member(
    ctx: Context, team_ref: str, user_ref: str, actor: str, client: str | None
) -> TeamView:
    """Take the user out of the team (and off it as their default team)."""
    async with _changing(ctx) as tx:
        team = await _team(tx.q, team_ref, lock=True)
        user = await _user(tx.q, user_ref)
        if not await tx.q.remove_member(team.id, user.id):
            raise NotFound(
                f"{user.name} is not in team {team.name}; its members are listed by "
                f"GET /api/teams/{team.name}",
                cli=f"{user.name} is not in team {team.name}; see its members: "
                f"gpufleet teams show {team.name}",
            )
        tx.audit("team.member_removed", actor, team.id, client, team=team.name, user=user.name)
        return await _one_team(tx, team.id)


# ---- submit -----------------------------------------------------------------------------


async def resolve_submitter(q: Queries, user_id: str, team: str | None) -> tuple[User, Team | None]:
    """Who submits, and for which team: the one named (id or name; one of theirs), else
    their default team, else their only team, else none."""
    found = await q.user_and_teams(user_id)
    if found is None:
        raise _no_user(user_id)
    user, theirs = found
    asked = None
    if team is not None:
        asked = next((t for t in theirs if team in (t.id, t.name)), None)
        asked = asked or await q.team_by_ref(team)
        if asked is None:
            raise rules.no_such_team(user, team, theirs)
    return user, rules.choose_team(user, theirs, asked)
