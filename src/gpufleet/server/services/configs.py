"""Stored configs: their owners, the team they are shared with, and their versions.

Who may change one is `domain/ownership.py`'s to say; this module reads what the rule needs
(the caller's teams, the config's owner and team), asks, and writes. Reads stay open to any
`queue.read` key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.domain.jobspec import (
    MAX_CONFIG_BYTES,
    check_config,
    check_config_name,
    config_digest,
    could_be_config_name,
)
from gpufleet.domain.ownership import Actor, ConfigAction, ConfigOwner, may_change_config
from gpufleet.domain.records import ConfigVersion, StoredConfig, User
from gpufleet.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpufleet.server.context import Context, transaction
from gpufleet.store.queries import Queries

MAX_VERSIONS_PAGE = 100  # versions one read lists (their bodies: one at a time)


@dataclass(frozen=True, slots=True)
class ConfigView:
    """A stored config and what a person calls its owner, team and writer (id → name; the
    ids of deleted ones are left out)."""

    config: StoredConfig
    names: dict[str, str]


def _no_config(name: str) -> NotFound:
    return NotFound(
        f"no config named {name!r}; list configs with GET /api/configs",
        ui=f"no config named {name!r}; the Train page lists the stored configs",
        cli=f"no config named {name!r}; list them with `gpufleet configs list`",
    )


async def _actor(q: Queries, user: User) -> Actor:
    teams = frozenset(t.id for t in await q.teams_of(user.id))
    return Actor(user_id=user.id, level=user.level, teams=teams)


async def _names(q: Queries, configs: Sequence[StoredConfig]) -> dict[str, str]:
    users = {c.owner_id for c in configs} | {c.written_by for c in configs if c.written_by}
    teams = {c.team_id for c in configs if c.team_id}
    names = dict(await q.user_names(users)) if users else {}
    if teams:
        names.update(await q.team_names(teams))
    return names


def _refused(
    name: str, action: ConfigAction, stored: StoredConfig, names: dict[str, str], user: User
) -> Forbidden:
    """Who may, in each surface's terms, and where the caller's own copy can go instead."""
    owner = names.get(stored.owner_id, stored.owner_id)
    team = names.get(stored.team_id, stored.team_id) if stored.team_id else None
    who = (
        f"its owner ({owner}), the leads of team {team} and admins"
        if team
        else f"only its owner ({owner}) and admins"
    )
    verb = "overwrite" if action is ConfigAction.OVERWRITE else "delete"
    said = f"config {name!r} belongs to {owner}{f' (shared with team {team})' if team else ''}"
    said += f"; {who} may {verb} it"
    if action is not ConfigAction.OVERWRITE:
        return Forbidden(f"{said}; ask one of them")
    mine = f"{name}-{user.name}"[:128]
    other = f" (e.g. {mine})" if could_be_config_name(mine) else ""
    return Forbidden(
        f"{said}; store yours under another name{other} with PUT /api/configs/NAME",
        ui=f"{said}; type another name{other} in Save as and Save config again",
        cli=f"{said}; store yours under another name: gpufleet configs put FILE --name "
        f"{mine if other else 'NAME'}",
    )


async def _team_asked(q: Queries, team: str) -> str:
    found = await q.team_by_ref(team)
    if found is None:
        said = f"no team {team!r} to share the config with; name one of your teams (id or name)"
        raise InvalidInput(f"{said}, or leave team out", cli=f"{said}, or leave --team out")
    return found.id


def _share_refused(name: str, team: str | None) -> Forbidden:
    if team is None:
        said = f"only the owner of config {name!r} and admins may stop sharing it"
    else:
        said = (
            f"config {name!r} can be shared with team {team!r} only by its owner, if they "
            "are in that team, or by an admin"
        )
    return Forbidden(
        f"{said}; leave team out to keep it as it is",
        cli=f"{said}; leave --team and --no-team out to keep it as it is",
    )


async def put_config(
    ctx: Context,
    name: str,
    body: Any,
    user: User,
    actor: str,
    client: str | None,
    *,
    team: str | None = None,
) -> tuple[ConfigView, bool]:
    """Store `body` as the config's next version (version 1 makes it, owned by `user`).
    `team`: share it with this team (id or name); "": with none; None: as it is."""
    check_config_name(name)
    body = check_config(body)
    if len(json.dumps(body)) > MAX_CONFIG_BYTES:
        raise InvalidInput(f"config {name!r} is larger than 1 MB; keep data out of configs")
    digest = config_digest(body)
    async with transaction(ctx) as tx:
        who = await _actor(tx.q, user)
        stored = await tx.q.get_config(name, lock=True)
        team_id = await _team_asked(tx.q, team) if team else None
        if stored is None:
            new = StoredConfig(name, body, tx.now, tx.now, user.id, team_id, 1, digest, user.id)
            mine = ConfigOwner(user.id, None)
            if team_id and not may_change_config(who, mine, ConfigAction.SHARE, share_with=team_id):
                raise _share_refused(name, team)
            if not await tx.q.insert_config(new):
                raise Conflict(f"config {name!r} was stored by someone else just now; try again")
        else:
            owner = ConfigOwner(stored.owner_id, stored.team_id)
            if not may_change_config(who, owner, ConfigAction.OVERWRITE):
                names = await _names(tx.q, [stored])
                raise _refused(name, ConfigAction.OVERWRITE, stored, names, user)
            shared = stored.team_id if team is None else team_id
            if shared != stored.team_id and not may_change_config(
                who, owner, ConfigAction.SHARE, share_with=shared
            ):
                raise _share_refused(name, team or None)
            new = replace(
                stored,
                body=body,
                updated_at=tx.now,
                team_id=shared,
                version=stored.version + 1,
                digest=digest,
                written_by=user.id,
            )
            await tx.q.update_config(new)
        tx.audit(
            "config.created" if stored is None else "config.updated",
            actor,
            name,
            client,
            version=new.version,
            digest=digest,
            owner_id=new.owner_id,
            team_id=new.team_id,
        )
        names = await _names(tx.q, [new])
    return ConfigView(new, names), stored is None


async def get_config(ctx: Context, name: str) -> ConfigView:
    check_config_name(name)
    async with ctx.store.read() as q:
        stored = await q.get_config(name)
        if stored is None:
            raise NotFound(
                f"no config named {name!r}; store one with PUT /api/configs/{name}",
                ui=f"no config named {name!r}; save one with Save config on the Train page",
                cli=f"no config named {name!r}; store one with `gpufleet configs put FILE "
                f"--name {name}`",
            )
        return ConfigView(stored, await _names(q, [stored]))


async def list_configs(ctx: Context) -> tuple[list[StoredConfig], dict[str, str]]:
    async with ctx.store.read() as q:
        found = await q.list_configs()
        return found, await _names(q, found)


async def list_versions(
    ctx: Context, name: str, limit: int, offset: int
) -> tuple[list[ConfigVersion], dict[str, str]]:
    """The config's versions, newest first; its writers' names."""
    check_config_name(name)
    async with ctx.store.read() as q:
        if await q.get_config(name) is None:
            raise _no_config(name)
        versions = await q.config_versions(name, min(limit, MAX_VERSIONS_PAGE), offset)
        writers = {v.written_by for v in versions if v.written_by}
        return versions, dict(await q.user_names(writers)) if writers else {}


async def get_version(
    ctx: Context, name: str, version: int
) -> tuple[ConfigVersion, dict[str, str]]:
    check_config_name(name)
    async with ctx.store.read() as q:
        found = await q.config_version(name, version)
        if found is None:
            if await q.get_config(name) is None:
                raise _no_config(name)
            raise NotFound(
                f"config {name!r} has no version {version}; list them with GET "
                f"/api/configs/{name}/versions",
                cli=f"config {name!r} has no version {version}; list them with `gpufleet "
                f"configs versions {name}`",
            )
        names = dict(await q.user_names([found.written_by])) if found.written_by else {}
        return found, names


async def delete_config(
    ctx: Context, name: str, user: User, actor: str, client: str | None
) -> None:
    """The config and every version of it, if `user` may (domain/ownership.py)."""
    check_config_name(name)
    async with transaction(ctx) as tx:
        stored = await tx.q.get_config(name, lock=True)
        if stored is None:
            raise _no_config(name)
        owner = ConfigOwner(stored.owner_id, stored.team_id)
        if not may_change_config(await _actor(tx.q, user), owner, ConfigAction.DELETE):
            names = await _names(tx.q, [stored])
            raise _refused(name, ConfigAction.DELETE, stored, names, user)
        versions = await tx.q.delete_config(name)
        tx.audit(
            "config.deleted",
            actor,
            name,
            client,
            versions=versions,
            version=stored.version,
            digest=stored.digest,
            owner_id=stored.owner_id,
        )
