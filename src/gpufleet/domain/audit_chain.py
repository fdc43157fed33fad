"""The audit log's HMAC chain: each entry's MAC covers the one before it.

An entry is sealed in the transaction that writes it, so an entry without a seal was written
around the server; changing, inserting or removing a sealed entry breaks the MAC after it,
and only a holder of the server's key (kept outside the database) can forge a chain. Cutting
entries off the end leaves a shorter chain that still links: the server's own record of the
head (kept outside the database too) is what shows that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.domain.records import AuditEvent

GENESIS = "0" * 64
# Written once per database, when a gpufleet that seals on write first starts on it; its
# detail counts the entries an older version left unsealed and that were sealed then.
UPGRADED = "audit.chain_upgraded"
MAX_GAPS = 100  # gaps listed in a verification (the count of missing entries is whole)


@dataclass(frozen=True, slots=True)
class Head:
    """An entry's place in the chain and its MAC: the chain's end, once it is the last."""

    seq: int
    mac: str


START = Head(0, GENESIS)


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


def extend(key: bytes, head: Head, events: Sequence[AuditEvent]) -> list[Head]:
    """The places and MACs of `events`, appended in order after `head`."""
    seals = []
    for event in events:
        head = Head(head.seq + 1, link(key, head.mac, head.seq + 1, event))
        seals.append(head)
    return seals


@dataclass(frozen=True, slots=True)
class Broken:
    seq: int
    event_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class Gap:
    """Chain positions `first` to `last` (inclusive) hold no entry."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a walk of the chain found. Each finding but `checked` is evidence of tampering."""

    checked: int  # entries that verified, in order from the first, before any break
    unsealed: int  # entries without a seal: written around the server
    unsealed_ids: tuple[int, ...]  # the first of them
    gaps: tuple[Gap, ...]  # missing positions (the first MAX_GAPS runs)
    missing: int  # how many positions are missing in all
    first_broken: Broken | None  # the first missing or changed entry
    chain_head: int  # the last position in the database
    recorded_head: int | None  # the last position the server recorded outside it
    head_behind: bool  # the database no longer holds the recorded head as it was

    @property
    def ok(self) -> bool:
        return (
            self.unsealed == 0
            and not self.gaps
            and self.first_broken is None
            and not self.head_behind
        )


class Walk:
    """Verifies a chain fed entry by entry in position order; pure, the caller reads."""

    def __init__(self, key: bytes, recorded: Head | None) -> None:
        self._key = key
        self._recorded = recorded
        self._previous = GENESIS
        self._expected = 1
        self._checked = 0
        self._gaps: list[Gap] = []
        self._missing = 0
        self._broken: Broken | None = None
        self._recorded_seen = False

    def feed(self, seq: int, mac: str, event: AuditEvent) -> None:
        if seq > self._expected:
            self._gap(self._expected, seq - 1)
        if self._broken is None and not hmac.compare_digest(
            mac, link(self._key, self._previous, seq, event)
        ):
            self._broken = Broken(seq, event.id, "the entry or the one before it was changed")
        if self._broken is None:
            self._checked += 1
        if self._recorded is not None and seq == self._recorded.seq:
            self._recorded_seen = hmac.compare_digest(mac, self._recorded.mac)
        self._previous, self._expected = mac, seq + 1

    def _gap(self, first: int, last: int) -> None:
        if self._broken is None:
            what = f"entry {first}" if first == last else f"entries {first} to {last}"
            verb = "is" if first == last else "are"
            self._broken = Broken(first, None, f"{what} of the chain {verb} missing")
        if len(self._gaps) < MAX_GAPS:
            self._gaps.append(Gap(first, last))
        self._missing += last - first + 1

    def verdict(self, unsealed: int, unsealed_ids: tuple[int, ...] = ()) -> Verdict:
        return Verdict(
            checked=self._checked,
            unsealed=unsealed,
            unsealed_ids=unsealed_ids,
            gaps=tuple(self._gaps),
            missing=self._missing,
            first_broken=self._broken,
            chain_head=self._expected - 1,
            recorded_head=self._recorded.seq if self._recorded else None,
            head_behind=self._recorded is not None and not self._recorded_seen,
        )


def parse_head(line: str) -> Head | None:
    """One `seq mac` line of the head record; None for a line cut short by a crash."""
    parts = line.split()
    if len(parts) != 2 or not parts[0].isdigit() or len(parts[1]) != 64:
        return None
    return Head(int(parts[0]), parts[1])


def format_head(head: Head) -> str:
    return f"{head.seq} {head.mac}\n"
