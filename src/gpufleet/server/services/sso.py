"""Single sign-on: who a provider's verified claims are here (docs/security.md).

`sign_in` provisions the person at their first sign-in and sets their level and mapped teams
from their groups at every one (the rules: `domain/sso.py`), each change audited; its answer
is the user's sign-in key, which the web session cookie (and the CLI's short-lived session
token) names. That key's secret is never shown to anyone: it is only ever named by a signed
session, so revoking it (or deleting the user) ends every session made from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain import sso as rules
from gpufleet.domain.levels import Level
from gpufleet.domain.permissions import ALL
from gpufleet.domain.records import ApiKey, User
from gpufleet.domain.secrets import hash_secret, new_api_key, new_id
from gpufleet.errors import Conflict, Unauthenticated
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import TEAMS_TOPIC
from gpufleet.server.oidc_client import Provider

SSO_ACTOR = "sso"  # the audit's actor for what a sign-in changes; the sign-in keys' maker
SIGN_IN_KEY_NAME = "single sign-on"


def provider(ctx: Context) -> Provider:
    if ctx.sso is None:
        raise Unauthenticated(
            "single sign-on is off on this orchestrator; sign in with an API key (an admin "
            "turns it on with --oidc-issuer)"
        )
    return ctx.sso


async def sign_in(
    ctx: Context, claims: Mapping[str, Any], client: str | None
) -> tuple[User, ApiKey]:
    """The user the verified claims name, provisioned or brought up to date, and the key
    their sessions name."""
    sso = provider(ctx)
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated("the identity provider named no subject (sub); sign in again")
    settings = ctx.settings
    want = rules.standing(
        rules.groups_of(claims, settings.oidc_groups_claim),
        rules.parse_group_map(settings.oidc_group_map),
        Level(settings.oidc_default_level),
    )
    async with transaction(ctx) as tx:
        user = await tx.q.user_of_identity(sso.issuer, subject)
        if user is None:
            user = await _provision(tx, sso.issuer, subject, claims, want.level, client)
            if user is None:  # a concurrent first sign-in of theirs provisioned them first
                user = await tx.q.user_of_identity(sso.issuer, subject)
            if user is None:  # or another person's took the name: theirs is decided again
                raise Conflict(
                    "another sign-in took this user name at the same moment; sign in again"
                )
        else:
            await tx.q.touch_identity(sso.issuer, subject, tx.now)
            if user.level != want.level:
                await tx.q.update_user(user.id, level=want.level.value)
                tx.audit("user.updated", SSO_ACTOR, user.id, client, level=want.level.value)
                user = await _reread(tx, user.id)
        await _follow_teams(tx, user, want, client)
        key = await _sign_in_key(tx, user, client)
        tx.audit("user.signed_in", SSO_ACTOR, user.id, client, issuer=sso.issuer, name=user.name)
        tx.wake(TEAMS_TOPIC)
    return user, key


async def _reread(tx: Tx, user_id: str) -> User:
    user = await tx.q.get_user(user_id)
    if user is None:  # deleted by an admin in between: our lock says otherwise
        raise Conflict("the user was deleted while signing in; sign in again")
    return user


async def _provision(
    tx: Tx,
    issuer: str,
    subject: str,
    claims: Mapping[str, Any],
    level: Level,
    client: str | None,
) -> User | None:
    """The user a first sign-in makes; None when a concurrent one made it (or took its name)
    first."""
    name = rules.user_name(claims, issuer, subject)
    if await tx.q.user_name_taken(name):
        name = rules.taken_name(name, issuer, subject)
        if await tx.q.user_name_taken(name):
            raise Conflict(
                f"the user name {name!r} is taken; ask an admin to rename that user, then "
                "sign in again"
            )
    user_id = new_id("u")
    values = {"id": user_id, "name": name, "level": level.value, "usage": 0.0, "created_at": tx.now}
    if not await tx.q.provision_user(values, issuer, subject, tx.now):
        return None
    tx.audit(
        "user.created", SSO_ACTOR, user_id, client, name=name, level=level.value, issuer=issuer
    )
    return await _reread(tx, user_id)


async def _follow_teams(tx: Tx, user: User, want: rules.Standing, client: str | None) -> None:
    """Into the mapped teams of the person's groups (made if missing), out of the other
    mapped ones; teams the mapping does not name are left as admins set them."""
    for name in sorted(want.teams):
        team = await tx.q.team_by_ref(name)
        if team is None:
            team_id = new_id("t")
            await tx.q.insert_team(
                {"id": team_id, "name": name, "usage": 0.0, "created_at": tx.now}
            )
            tx.audit("team.created", SSO_ACTOR, team_id, client, name=name)
        else:
            team_id = team.id
        if await tx.q.add_member(team_id, user.id):
            tx.audit("team.member_added", SSO_ACTOR, team_id, client, user=user.id)
    for name in sorted(want.not_teams):
        team = await tx.q.team_by_ref(name)
        if team is not None and await tx.q.remove_member(team.id, user.id):
            tx.audit("team.member_removed", SSO_ACTOR, team.id, client, user=user.id)


async def _sign_in_key(tx: Tx, user: User, client: str | None) -> ApiKey:
    """The user's sign-in key, made at the first sign-in (or after it was revoked). Its
    permissions are the user's level's, whatever that level becomes."""
    found = await tx.q.sign_in_key(user.id, SSO_ACTOR)
    if found is not None:
        return found
    key_id = new_id("k")
    await tx.q.insert_api_key(
        {
            "id": key_id,
            "name": SIGN_IN_KEY_NAME,
            "key_hash": hash_secret(new_api_key()),  # never shown: only sessions name it
            "permissions": [ALL],
            "created_at": tx.now,
            "created_by": SSO_ACTOR,
            "user_id": user.id,
        }
    )
    tx.audit("apikey.created", SSO_ACTOR, key_id, client, name=SIGN_IN_KEY_NAME, permissions=[ALL])
    key = await tx.q.sign_in_key(user.id, SSO_ACTOR)
    if key is None:
        raise Conflict("the sign-in key vanished as it was made; sign in again")
    return key
