"""Who is calling: API keys for people and scripts, worker tokens for workers."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

from gpufleet.domain.audit_events import SYSTEM_ACTOR, key_actor
from gpufleet.domain.bounds import MAX_STREAMS_PER_KEY
from gpufleet.domain.levels import ADMIN_USER_ID, ADMIN_USER_NAME, Level
from gpufleet.domain.permissions import (
    ALL,
    LEVEL_PERMISSIONS,
    allows,
    check_permissions,
    effective_permissions,
)
from gpufleet.domain.records import ApiKey, User, Worker
from gpufleet.domain.secrets import hash_secret, new_api_key, new_id, same_hash
from gpufleet.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    StoreError,
    TooManyRequests,
    Unauthenticated,
)
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import Subscription, key_topic, session_topic

log = logging.getLogger("gpufleet.server.auth")
USE_RESOLUTION = timedelta(minutes=1)  # how finely `last_used_at` is kept


@dataclass(frozen=True, slots=True)
class Principal:
    """A key and the user it belongs to: what it may do is what both allow."""

    key: ApiKey
    user: User
    session: str | None = None  # a web session's nonce: signing out ends its streams

    @property
    def permissions(self) -> frozenset[str]:
        return frozenset(effective_permissions(self.key.permissions, self.user.level))

    @property
    def actor(self) -> str:
        return self.actor_of(self.key.id)

    @staticmethod
    def actor_of(key_id: str) -> str:
        return key_actor(key_id)


def _check_not_locked_out(ctx: Context, client: str | None) -> None:
    """Refuse a failed attempt from an address that failed too often (never a valid one)."""
    wait = ctx.auth_failures.retry_after(client)
    if wait > 0:
        raise TooManyRequests(
            f"too many failed authentications from {client}; try again in {math.ceil(wait)} s "
            "with a valid key or token",
            retry_after=wait,
        )


async def _auth_failed(
    ctx: Context,
    kind: str,
    client: str | None,
    why: str,
    event: str = "auth.failed",
    **detail: str,
) -> None:
    reached = ctx.auth_failures.failed(client)
    async with transaction(ctx) as tx:
        tx.observe("auth_failure", 1.0, kind)
        tx.audit(event, "anonymous", None, client, credential=kind, reason=why, **detail)
        if reached:
            _audit_rate_limited(ctx, tx, client)


def _audit_rate_limited(ctx: Context, tx: Tx, client: str | None, **detail: str) -> None:
    """The audit row for an address that just reached the failure limit."""
    tx.audit(
        "auth.rate_limited",
        SYSTEM_ACTOR,
        None,
        client,
        limit=ctx.auth_failures.limit,
        window_s=ctx.auth_failures.window,
        **detail,
    )


async def _credential_missing(ctx: Context, client: str | None) -> None:
    """A request with no credential at all: counted against its address as a wrong one is,
    but not audited one by one (a scanner sends thousands; each would be a write). The count
    is in the metrics, and the audit log hears of the address when it reaches the limit."""
    ctx.metrics.apply([("auth_failure", 1.0, ("none",))])
    if ctx.auth_failures.failed(client):
        async with transaction(ctx) as tx:
            _audit_rate_limited(ctx, tx, client, credential="none")


async def authenticate_key(
    ctx: Context, presented: str | None, needed: str | None, client: str | None
) -> Principal:
    """The key's principal; `needed=None` accepts any valid key (signing in to the web UI).

    The credential is checked first: a valid key is never throttled, whoever else shares its
    address (a NAT, a proxy). Only a missing or wrong one meets the failed-auth limiter."""
    if presented:
        async with ctx.store.read() as q:
            found = await q.api_key_for_hash(hash_secret(presented))
        if found is not None and same_hash(found[0], presented):
            if ctx.settings.oidc_only and not found[2].service:
                await _auth_failed(ctx, "api_key", client, "a person's key under --oidc-only")
                raise Unauthenticated(
                    f"this orchestrator signs people in through single sign-on only: the key "
                    f"of {found[2].name}, who is no service user, is not accepted; sign in with "
                    "the provider on the sign-in page",
                    cli="this orchestrator signs people in through single sign-on only; run "
                    "`gpufleet login` (API keys work for service users only)",
                )
            principal = permit(Principal(found[1], found[2]), needed)
            await note_use(ctx, principal.key)
            return principal
    _check_not_locked_out(ctx, client)
    if not presented:
        await _credential_missing(ctx, client)
        raise Unauthenticated(
            "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>' "
            "(the admin key is in <data-dir>/admin.token)"
        )
    await _auth_failed(ctx, "api_key", client, "unknown or revoked key")
    raise Unauthenticated("invalid API key: it is unknown or was revoked; use a valid key")


async def note_use(ctx: Context, key: ApiKey) -> None:
    """Record when the key was last used, to the minute: at most one write a minute a key,
    and never one that fails the request it was noted for."""
    now = ctx.clock()
    if key.last_used_at is not None and now - key.last_used_at < USE_RESOLUTION:
        return
    try:
        async with ctx.store.write() as q:
            await q.touch_api_key(key.id, now)
    except StoreError as exc:
        log.warning("could not record the use of API key %s: %s", key.id, exc)


def permit(principal: Principal, needed: str | None) -> Principal:
    """The principal, if its key and its user's level both allow `needed`."""
    if needed is None or allows(principal.permissions, needed):
        return principal
    if allows(principal.key.permissions, needed):
        user = principal.user
        raise Forbidden(
            f"this API key belongs to {user.name}, whose level {user.level.value} does not "
            f"allow '{needed}'; ask an admin to raise their level, or use another key"
        )
    raise Forbidden(f"this API key lacks the '{needed}' permission; use a key that has it")


async def authenticate_worker(
    ctx: Context, presented: str | None, client: str | None, action: str
) -> Worker:
    """The worker a token names; checked before the limiter, like an API key."""
    token = presented.strip() if presented else ""
    if token:
        found = await _worker_for_token(ctx, hash_secret(token))
        if found is not None and same_hash(found[0], token):
            return found[1]
    _check_not_locked_out(ctx, client)
    if not token:
        await _credential_missing(ctx, client)
        raise Unauthenticated("no worker token: send the 'X-Worker-Token' header")
    event = "worker.register_failed" if action == "register" else "auth.failed"
    await _auth_failed(ctx, "worker_token", client, "invalid token", event, action=action)
    raise Unauthenticated(
        "invalid token: it may have been rotated (request a new one) or contain whitespace"
    )


async def _worker_for_token(ctx: Context, token_hash: str) -> tuple[str, Worker] | None:
    """The token's stored hash and its worker: through the store's worker cache (SQLite),
    else read."""

    async def read() -> tuple[str, Worker] | None:
        async with ctx.store.read() as q:
            return await q.worker_for_token(token_hash)

    cache = ctx.store.workers
    return await (read() if cache is None else cache.through(token_hash, read))


async def credential_refused(ctx: Context, kind: str, client: str | None, why: str) -> None:
    """Another kind of credential refused (single sign-on's code or refresh token): limited
    and audited as a wrong key is; 429 once the address is locked out."""
    _check_not_locked_out(ctx, client)
    await _auth_failed(ctx, kind, client, why)


async def upload_token_refused(ctx: Context, client: str | None, why: str) -> None:
    """A storage request (SimpleTuner's trainer) without a valid upload token: audited and
    counted against the client's address as any failed authentication is."""
    _check_not_locked_out(ctx, client)
    await _auth_failed(ctx, "upload_token", client, why)


async def mint_api_key(
    ctx: Context,
    name: str,
    permissions: list[str],
    caller: Principal,
    client: str | None = None,
    *,
    user: str | None = None,
) -> tuple[ApiKey, str, User]:
    """A key for `user` (id or name; default: the caller's own user), with no more than the
    user's level allows; only a '*' key mints for another user."""
    perms = check_permissions(permissions)
    async with transaction(ctx) as tx:
        owner = caller.user if user is None else await tx.q.user_by_ref(user)
        if owner is None:
            raise NotFound(
                f"no user {user!r} to mint the key for; list users with GET /api/users",
                cli=f"no user {user!r} to mint the key for; list them: gpufleet users list",
            )
        if owner.id != caller.user.id and not allows(caller.permissions, ALL):
            raise Forbidden(
                f"only a key with the '*' permission mints keys for another user than its "
                f"own ({caller.user.name}); leave the user out"
            )
        _check_level_allows(owner, perms)
        key, raw = await _insert_key(tx, name, perms, caller.actor, client, owner.id)
        return key, raw, owner


def _check_level_allows(user: User, perms: list[str]) -> None:
    allowed = LEVEL_PERMISSIONS[user.level]
    beyond = [p for p in perms if not allows(allowed, p)]
    if beyond:
        raise InvalidInput(
            f"{user.name} is at level {user.level.value}, which does not allow "
            f"{', '.join(repr(p) for p in beyond)}; a key of theirs may have at most: "
            f"{', '.join(sorted(allowed))}"
        )


async def _insert_key(
    tx: Tx,
    name: str,
    perms: list[str],
    actor: str,
    client: str | None,
    user_id: str = ADMIN_USER_ID,
) -> tuple[ApiKey, str]:
    raw = new_api_key()
    key_id = new_id("k")
    await tx.q.insert_api_key(
        {
            "id": key_id,
            "name": name,
            "key_hash": hash_secret(raw),
            "permissions": perms,
            "created_at": tx.now,
            "created_by": actor,
            "user_id": user_id,
        }
    )
    tx.audit("apikey.created", actor, key_id, client, name=name, permissions=perms)
    key = ApiKey(
        id=key_id,
        name=name,
        permissions=frozenset(perms),
        created_at=tx.now,
        revoked=False,
        user_id=user_id,
    )
    return key, raw


async def list_api_keys(ctx: Context) -> tuple[list[ApiKey], dict[str, str]]:
    """Every key, and the names of their users by id."""
    async with ctx.store.read() as q:
        keys = await q.list_api_keys()
        return keys, await q.user_names(k.user_id for k in keys if k.user_id)


async def session_principal(ctx: Context, key_id: str, nonce: str) -> Principal | None:
    """A web session's principal, unless its key is unknown or revoked, or the session was
    signed out."""
    async with ctx.store.read() as q:
        found = await q.api_key_for_session(key_id, nonce)
    return None if found is None or found[0].revoked else Principal(*found, session=nonce)


async def revoke_api_key(ctx: Context, key_id: str, actor: str, client: str | None) -> None:
    if actor == Principal.actor_of(key_id):
        raise Conflict(
            f"{key_id} is the key you are using now, and revoking it would lock you out; "
            "revoke it while using another key that has the '*' permission"
        )
    async with transaction(ctx) as tx:
        if not await tx.q.revoke_api_key(key_id, tx.now):
            raise NotFound(f"no active API key {key_id}; it may already be revoked")
        tx.audit("apikey.revoked", actor, key_id, client)
        tx.end_streams(key_topic(key_id))  # its open streams end, on every replica


async def active_key(ctx: Context, key_id: str) -> ApiKey | None:
    """The key, unless it is unknown or revoked."""
    async with ctx.store.read() as q:
        key = await q.get_api_key(key_id)
    return None if key is None or key.revoked else key


@contextlib.asynccontextmanager
async def subscription(
    ctx: Context, principal: Principal, topic: str, *more: str
) -> AsyncIterator[Subscription]:
    """A stream's subscription to the topics, closed when the key that opened it is revoked,
    the web session that opened it signs out, or when it is the oldest of more than
    `MAX_STREAMS_PER_KEY` the key holds open here.

    The key (and session) is read again once subscribed, so that a revoke landing between the
    request's authentication and now is not missed; after that only the revoke's close is
    heard."""
    key_id, session = principal.key.id, principal.session
    mine = key_topic(key_id)
    ends = [mine] + ([session_topic(session)] if session else [])
    with ctx.hub.subscribe(topic, *more, *ends) as sub:
        if closed := ctx.hub.close_oldest(mine, MAX_STREAMS_PER_KEY):
            log.info(
                "closed %d event stream(s) of key %s: it holds %d open, the most",
                closed,
                key_id,
                MAX_STREAMS_PER_KEY,
            )
        if session is None:
            gone = await active_key(ctx, key_id) is None
        else:
            gone = await session_principal(ctx, key_id, session) is None
        if gone:
            sub.close()
        yield sub


async def bootstrap_admin_key(ctx: Context) -> str | None:
    """On first start, mint the admin key and leave it in <data-dir>/admin.token (0600)."""
    async with transaction(ctx) as tx:
        await tx.q.lock_api_keys()  # replicas starting together mint one key, not several
        await tx.q.ensure_user(  # migration 0014 made it; a database emptied by hand lacks it
            {
                "id": ADMIN_USER_ID,
                "name": ADMIN_USER_NAME,
                "level": Level.ADMIN.value,
                "usage": 0.0,
                "created_at": tx.now,
                "service": True,  # admin.token is the operator's, also under --oidc-only
            }
        )
        if await tx.q.count_api_keys():
            return None
        _key, raw = await _insert_key(tx, "admin", [ALL], SYSTEM_ACTOR, None)
    path = ctx.settings.data_dir / "admin.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw + "\n")
    os.chmod(path, 0o600)
    return raw
