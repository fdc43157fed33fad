"""Reading the audit log, sealing it into an HMAC chain, and verifying the chain.

Entries are written inside each operation's transaction; a supervised loop seals them in
order shortly after, so writers never wait on the chain.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from gpufleet.domain import audit_chain
from gpufleet.domain.records import AuditEvent
from gpufleet.errors import ConfigurationError
from gpufleet.server.context import Context, transaction
from gpufleet.store.queries import AuditFilter

_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Verification:
    ok: bool
    checked: int
    unsealed: int
    first_broken: audit_chain.Broken | None


async def list_events(
    ctx: Context, f: AuditFilter, limit: int, offset: int
) -> tuple[list[AuditEvent], int]:
    async with ctx.store.read() as q:
        return await q.list_audit(f, limit, offset)


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


async def seal(ctx: Context) -> int:
    """Chain every unsealed entry, in id order. Returns how many were sealed."""
    assert ctx.audit_key is not None
    sealed = 0
    while True:
        async with transaction(ctx) as tx:
            await tx.q.lock_audit_chain()
            head = await tx.q.audit_chain_head()
            seq, mac = head if head else (0, audit_chain.GENESIS)
            batch = await tx.q.unsealed_audit(_BATCH)
            seals = []
            for event in batch:
                seq += 1
                mac = audit_chain.link(ctx.audit_key, mac, seq, event)
                seals.append((event.id, seq, mac))
            await tx.q.seal_audit(seals)
        sealed += len(batch)
        if len(batch) < _BATCH:
            return sealed


async def verify(ctx: Context) -> Verification:
    assert ctx.audit_key is not None
    await seal(ctx)
    previous, expected, checked = audit_chain.GENESIS, 1, 0
    async with ctx.store.read() as q:
        while True:
            chunk = await q.audit_chain(expected - 1, _BATCH)
            for seq, mac, event in chunk:
                broken = audit_chain.check(ctx.audit_key, previous, expected, seq, mac, event)
                if broken is not None:
                    unsealed = await q.count_unsealed_audit()
                    return Verification(False, checked, unsealed, broken)
                previous, expected, checked = mac, expected + 1, checked + 1
            if len(chunk) < _BATCH:
                break
        unsealed = await q.count_unsealed_audit()
    return Verification(True, checked, unsealed, None)
