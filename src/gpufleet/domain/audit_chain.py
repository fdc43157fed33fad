"""The audit log's HMAC chain: each sealed entry's MAC covers the one before it.

Changing, inserting or removing a sealed entry breaks every MAC after it, and only a holder
of the server's key (kept outside the database) can forge a chain.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass

from gpufleet.domain.records import AuditEvent

GENESIS = "0" * 64


def canonical(seq: int, event: AuditEvent) -> bytes:
    body = {
        "seq": seq,
        "id": event.id,
        "ts": event.ts.isoformat(),
        "type": event.event_type,
        "actor": event.actor,
        "target": event.target,
        "client": event.client_addr,
        "detail": event.detail,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def link(key: bytes, previous_mac: str, seq: int, event: AuditEvent) -> str:
    return hmac.new(key, previous_mac.encode() + canonical(seq, event), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Broken:
    seq: int
    event_id: int | None
    reason: str


def check(
    key: bytes, previous_mac: str, expected_seq: int, seq: int, mac: str, event: AuditEvent
) -> Broken | None:
    if seq != expected_seq:
        return Broken(expected_seq, None, f"entry {expected_seq} of the chain is missing")
    if not hmac.compare_digest(mac, link(key, previous_mac, seq, event)):
        return Broken(seq, event.id, "the entry or the one before it was changed")
    return None
