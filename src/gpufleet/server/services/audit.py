"""Reading the audit log, recording its chain's head outside the database, verifying it.

Entries are sealed into the HMAC chain by the transaction that writes them (`context.py`).
Each process also keeps the newest entry it sealed in `<data-dir>/audit.head`, once a second,
so that entries cut off the chain's end, which leave a shorter chain that still links, show.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from gpufleet.domain import audit_chain
from gpufleet.domain.audit_events import (
    SYSTEM_ACTOR,
    check_period,
    is_known_type,
    key_actor,
    unknown_type,
    worker_actor,
)
from gpufleet.domain.filters import AuditFilter
from gpufleet.domain.records import AuditEvent
from gpufleet.errors import ConfigurationError
from gpufleet.server.context import Context, transaction

log = logging.getLogger("gpufleet.server.audit")
_BATCH = 1000
_UNSEALED_LISTED = 20


@dataclass(frozen=True, slots=True)
class AuditPage:
    events: list[AuditEvent]
    total: int
    names: dict[str, str]  # actor (`key:k_…`, `worker:w_…`) -> the key's or worker's name
    hint: str | None  # when nothing matches: what may be why
    users: dict[str, str]  # actor (`key:k_…`) -> the name of the user whose key it is


async def list_events(ctx: Context, f: AuditFilter, limit: int, offset: int) -> AuditPage:
    """A page of the log. The actor filter takes an actor as recorded (`key:k_…`), a key's
    id or name, a worker's name, or else a user's name (their keys' events); the user
    filter a user's name or id."""
    check_period(f.since, f.until)
    async with ctx.store.read() as q:
        known = not f.event_type or is_known_type(f.event_type)
        # A type the catalogue lacks is one a newer module records, if the log holds it.
        if f.event_type and not known and not await q.audit_type_exists(f.event_type):
            raise unknown_type(f.event_type)
        keys = await q.list_api_keys()
        people = {u.id: u.name for u in await q.list_users()}
        names = {key_actor(k.id): k.name for k in keys}
        names |= {worker_actor(w.id): w.name for w in await q.list_workers()}
        owners = {key_actor(k.id): people[k.user_id] for k in keys if k.user_id in people}
        f, hint = _resolve(f, names, owners, people)
        events, total = await q.list_audit(f, limit, offset)
    shown = {e.actor: names[e.actor] for e in events if e.actor in names}
    users = {e.actor: owners[e.actor] for e in events if e.actor in owners}
    return AuditPage(events, total, shown, hint if total == 0 else None, users)


def _resolve(
    f: AuditFilter, names: dict[str, str], owners: dict[str, str], people: dict[str, str]
) -> tuple[AuditFilter, str | None]:
    """The filter with its actor and user as recorded, and a hint in case it finds nothing.
    An actor no key or worker is named, but a user is, means that user's keys."""
    if f.actor in people.values() and f.actor not in names.values() and not f.user:
        f = replace(f, actor=None, user=f.actor)
    actor, hint = _resolve_actor(f.actor, names)
    user = f.user
    if not user:
        return replace(f, actor=actor), hint
    person = people.get(user) or next((n for n in people.values() if n == user), None)
    if person is None:
        hint = f"no user named {user!r}; the user filter is a user's name or id (u_…)"
        return replace(f, actor=actor, actors=()), hint
    actors = tuple(sorted(a for a, owner in owners.items() if owner == person))
    hint = f"{person}'s keys recorded nothing that matches the other filters"
    return replace(f, actor=actor, actors=actors), hint


def _resolve_actor(value: str | None, names: dict[str, str]) -> tuple[str | None, str | None]:
    """The actor a filter means, and a hint in case it finds nothing."""
    if not value:
        return None, None
    if value in names or ":" in value or value == SYSTEM_ACTOR:
        return value, f"{value} recorded nothing that matches the other filters"
    if value.startswith("k_"):
        return key_actor(value), f"no events by the key {value}; is the id right?"
    named = [actor for actor, name in names.items() if name == value]
    if len(named) == 1:
        return named[0], f"{value} ({named[0]}) recorded nothing that matches the other filters"
    if len(named) > 1:
        return named[0], (
            f"several keys or workers are named {value!r}; filter by id: {', '.join(named)}"
        )
    return value, (
        f"no key, worker or user named {value!r}; the actor is a key's name or id (k_…), a "
        "worker's name, worker:w_…, a user's name, or system"
    )


def load_key(path: Path) -> bytes:
    """The chain's key, made on first start (0600). Replicas must share the same file."""
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot use the audit key {path} ({exc}); it must hold 64 hex characters"
        ) from exc
    if len(key) < 16:
        raise ConfigurationError(f"the audit key {path} is too short; use 32 random bytes")
    return key


async def seal_legacy(ctx: Context) -> int:
    """Once per database, at start: seal the entries a gpufleet older than sealing on write
    left for its seal loop, and say so in the chain (`audit.chain_upgraded`). Returns how
    many were sealed. From then on an unsealed entry is never sealed."""
    async with transaction(ctx) as tx:
        await tx.q.lock_audit_chain()
        if await tx.q.audit_event_exists(audit_chain.UPGRADED):
            return 0
        if recorded_head(head_file(ctx)) is not None:  # this server sealed on write before
            log.error(
                "the audit chain has no %s entry although %s records its head: it was "
                "removed; unsealed entries stay unsealed (GET /api/audit/verify)",
                audit_chain.UPGRADED,
                head_file(ctx),
            )
            return 0
        sealed = 0
        while batch := await tx.q.unsealed_audit(_BATCH):
            head = await tx.q.audit_chain_head() or audit_chain.START
            seals = audit_chain.extend(ctx.audit_key, head, batch)
            await tx.q.seal_audit([(e.id, s.seq, s.mac) for e, s in zip(batch, seals, strict=True)])
            sealed += len(batch)
        tx.audit(audit_chain.UPGRADED, SYSTEM_ACTOR, legacy_sealed=sealed)
    if sealed:
        log.warning("sealed %d audit entries written unsealed by an older gpufleet", sealed)
    return sealed


def head_file(ctx: Context) -> Path:
    return ctx.settings.data_dir / "audit.head"


def recorded_head(path: Path) -> audit_chain.Head | None:
    """The head recorded in `path`, if any."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the audit head record {path}: {exc}") from exc
    heads = [h for h in map(audit_chain.parse_head, lines) if h is not None]
    return max(heads, key=lambda h: h.seq) if heads else None


async def record_head(ctx: Context) -> bool:
    """Record the newest entry this process sealed, unless the chain no longer holds the one
    recorded before: then the old record stays, the evidence of the cut. Returns whether it
    wrote."""
    head, path = ctx.audit_head.newest, head_file(ctx)
    before = recorded_head(path)
    if head is None or (before is not None and head.seq <= before.seq):
        return False
    if before is not None:
        async with ctx.store.read() as q:
            still = await q.audit_mac_at(before.seq)
        if still != before.mac:
            if ctx.audit_head.found_cut():
                log.error(
                    "the audit chain no longer holds entry %d as recorded in %s: entries were "
                    "cut from its end; the record is kept, GET /api/audit/verify reports it",
                    before.seq,
                    path,
                )
            return False
    partial = path.with_name(f"{path.name}.{ctx.instance_id}.tmp")  # replicas may share a folder
    partial.write_text(audit_chain.format_head(head))
    os.replace(partial, path)  # a reader sees the old record or the new one, whole
    return True


async def verify(ctx: Context) -> audit_chain.Verdict:
    walk = audit_chain.Walk(ctx.audit_key, recorded_head(head_file(ctx)))  # read first
    async with ctx.store.read() as q:
        after = 0
        while chunk := await q.audit_chain(after, _BATCH):
            for seq, mac, event in chunk:
                walk.feed(seq, mac, event)
            after = chunk[-1][0]
        unsealed = await q.count_unsealed_audit()
        listed = [e.id for e in await q.unsealed_audit(_UNSEALED_LISTED)] if unsealed else []
    return walk.verdict(unsealed, tuple(listed))
