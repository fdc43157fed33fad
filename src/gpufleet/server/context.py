"""What every service needs, passed explicitly; and the transaction wrapper they share."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.artifacts.store import ArtifactStore
from gpufleet.domain import audit_chain
from gpufleet.errors import StoreError
from gpufleet.protocol import Event
from gpufleet.server.bus import Replicas
from gpufleet.server.hub import AUDIT_TOPIC, Hub, worker_topic
from gpufleet.server.memory import (
    AuditHead,
    Batches,
    DigestLocks,
    Heartbeats,
    LimitHolds,
    StreamCalls,
    WorkdirListings,
)
from gpufleet.server.metrics import Metrics, Observation
from gpufleet.server.oidc_client import Provider
from gpufleet.server.ratelimit import FailureLimiter
from gpufleet.server.settings import ServerSettings
from gpufleet.server.sse import KeepAlive
from gpufleet.store import Queries, Store
from gpufleet.store.backends import backend_for


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Context:
    """The shared handles (settings, store, hub, clock, replicas, key material) and the named
    parts holding this process's own state (server/memory.py), each with its one purpose."""

    settings: ServerSettings
    store: Store
    audit_key: bytes = field(repr=False)  # the audit chain's HMAC key (services/audit.py)
    artifacts: ArtifactStore  # where jobs' files are kept (docs/artifacts.md)
    hub: Hub = field(default_factory=Hub)
    clock: Callable[[], datetime] = utcnow
    instance_id: str = field(default_factory=lambda: secrets.token_hex(4))
    started_at: datetime = field(default_factory=utcnow)
    # Signs web UI sessions; the app loads it from <data-dir>/ui-secret so sessions outlive
    # a restart and any replica on the same data folder accepts them.
    ui_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    # Single sign-on's provider (--oidc-issuer); None when off.
    sso: Provider | None = None
    # The other replicas on a shared PostgreSQL database (wake-ups, presence, leadership).
    replicas: Replicas = field(init=False)
    # ---- the parts: this process's own state, one purpose each ----
    metrics: Metrics = field(default_factory=Metrics)  # what /metrics reports
    auth_failures: FailureLimiter = field(default_factory=lambda: FailureLimiter(20, 60.0))
    heartbeats: Heartbeats = field(default_factory=Heartbeats)  # heard, not yet written
    audit_head: AuditHead = field(default_factory=AuditHead)  # the newest entry sealed here
    stream_calls: StreamCalls = field(default_factory=StreamCalls)  # for shutdown to await
    keepalive: KeepAlive = field(init=False)  # when each stream is due a ping
    limit_holds: LimitHolds = field(default_factory=LimitHolds)  # for dispatch's extra looks
    workdir_locks: DigestLocks = field(default_factory=DigestLocks)  # snapshots being stored
    workdir_listings: WorkdirListings = field(default_factory=WorkdirListings)  # read lately
    batches: Batches = field(default_factory=Batches)  # gang start reports applied together

    def __post_init__(self) -> None:
        self.keepalive = KeepAlive(self.settings.stream_ping_interval)
        backend = backend_for(self.store.engine.url, self.instance_id)
        self.replicas = Replicas(self.hub, self.instance_id, backend)


class Tx:
    """One write transaction: its queries, its clock reading, and what to notify on commit."""

    def __init__(self, q: Queries, now: datetime, settings: ServerSettings, key: bytes) -> None:
        self.q = q
        self.now = now
        self.settings = settings
        self.key = key  # the server's key material (per-attempt upload tokens in offers)
        self.notify: set[str] = set()
        self.close: set[str] = set()
        self.handed: dict[str, list[dict[str, Any]]] = {}  # topic → events it was handed
        self.observations: list[Observation] = []
        self.audits: list[dict[str, Any]] = []
        self.savepoints = 0  # how many `savepoint`s are open now
        self._before_commit: list[Callable[[Tx], Awaitable[None]]] = []
        # The dispatch turn (`frees_a_worker`, `at_turn`): the audit chain's lock, which
        # every audited write holds until it commits anyway.
        self.takes_turn = False
        self._at_turn: list[Callable[[Tx], Awaitable[None]]] = []
        # Jobs whose last dependency this transaction ended (services/dependencies.py): the
        # caller offers them once it committed (the health loop's full pass would, later).
        self.released: list[str] = []

    def wake(self, *topics: str) -> None:
        """Notify the topics' subscribers on commit: they re-read what they wait for."""
        self.notify.update(topics)

    def end_streams(self, *topics: str) -> None:
        """Close the topics' subscriptions on commit, on every replica: their streams end."""
        self.close.update(topics)

    async def send_to_worker(self, worker_id: str, event: Event) -> None:
        """Queue a command for the worker: its stream sends it once this commits."""
        await self.send_to_workers([(worker_id, event)])

    async def send_to_workers(self, events: Sequence[tuple[str, Event]]) -> None:
        """`send_to_worker` for several, (worker id, command) each, in one write."""
        await self.q.push_events(events, self.now)
        self.wake(*(worker_topic(w) for w, _ in events))

    @contextlib.asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A part of the transaction undone alone if it raises (PostgreSQL's savepoint): its
        writes, and the notices, audit events and metrics it added."""
        kept = (set(self.notify), set(self.close), len(self.observations), len(self.audits))
        handed = {topic: list(events) for topic, events in self.handed.items()}
        self.savepoints += 1
        try:
            async with self.q.conn.begin_nested():
                yield
        except BaseException:
            self.notify, self.close = kept[0], kept[1]
            del self.observations[kept[2] :], self.audits[kept[3] :]
            self.handed = handed
            raise
        finally:
            self.savepoints -= 1

    def before_commit(self, write: Callable[[Tx], Awaitable[None]]) -> None:
        """Run `write` once just before the transaction commits: writes gathered to be made
        together (a batch's nodes, `services/node_reports.py`). Never inside a savepoint:
        what a savepoint writes is written within it."""
        if write not in self._before_commit:
            self._before_commit.append(write)

    async def turned(self) -> None:
        """The looks that wait for the dispatch turn, taken now."""
        for look in self._at_turn:
            await look(self)

    async def written(self) -> None:
        """The writes left for the commit, made now."""
        for write in self._before_commit:
            await write(self)

    def frees_a_worker(self) -> None:
        """This transaction makes a worker free to run a queued job: it takes the dispatch
        turn before it commits, so that a job queued at the same time (on any replica)
        either sees the worker free, or is seen by the worker's pass once this commits
        (services/dispatch.py `LastLook`)."""
        self.takes_turn = True

    def at_turn(self, look: Callable[[Tx], Awaitable[None]]) -> None:
        """Run `look` once, holding the dispatch turn, just before the transaction commits."""
        self.takes_turn = True
        self._at_turn.append(look)

    def hand_over(self, topic: str, event: dict[str, Any]) -> None:
        """Notify `topic` on commit with an event this transaction wrote, so that its
        subscriber sends it without reading it back (see `Hub.notify`)."""
        self.handed.setdefault(topic, []).append(event)

    def observe(self, name: str, value: float = 1.0, *labels: str) -> None:
        """Record a metric, counted only if this transaction commits."""
        self.observations.append((name, value, labels))

    def audit(
        self,
        event_type: str,
        actor: str,
        target: str | None = None,
        client: str | None = None,
        /,
        **detail: Any,
    ) -> None:
        """Record an audit event, written (all of the transaction's in one statement, in
        order) and sealed into the audit chain just before it commits."""
        self.audits.append(
            {
                "ts": self.now,
                "event_type": event_type,
                "actor": actor,
                "target": target,
                "client_addr": client,
                "detail": detail,
            }
        )


async def _append_audit(q: Queries, key: bytes, rows: list[dict[str, Any]]) -> audit_chain.Head:
    """Write audit entries sealed onto the chain's end: an entry is never stored unsealed,
    so an unsealed one was written around the server. The lock is held until commit."""
    await q.lock_audit_chain()
    stored, head = await q.insert_audit(rows)
    seals = audit_chain.extend(key, head, stored)
    await q.seal_audit([(e.id, s.seq, s.mac) for e, s in zip(stored, seals, strict=True)])
    return seals[-1]


@contextlib.asynccontextmanager
async def transaction(ctx: Context) -> AsyncIterator[Tx]:
    tx: Tx | None = None
    sealed: audit_chain.Head | None = None

    def committed() -> None:
        # Before the next writer on SQLite goes on (a freed worker's look at a deep queue
        # can hold the loop for milliseconds): the offer this transaction made goes first.
        if tx is None:
            raise StoreError("a transaction committed before it began; this is a bug")
        ctx.metrics.apply(tx.observations)
        if sealed is not None:
            ctx.audit_head.sealed(sealed)
        for topic in tx.close:
            ctx.hub.close(topic)
        for topic, events in tx.handed.items():
            ctx.hub.notify(topic, events)
        for topic in tx.notify:
            ctx.hub.notify(topic)

    told: int | None = None
    try:
        async with ctx.store.write(after_commit=committed) as q:
            tx = Tx(q, ctx.clock(), ctx.settings, ctx.audit_key)
            yield tx
            await tx.written()
            if tx.audits:  # its lock, held until commit, is the dispatch turn too
                sealed = await _append_audit(q, ctx.audit_key, tx.audits)
                tx.wake(AUDIT_TOPIC)
            elif tx.takes_turn:
                await q.lock_audit_chain()
            await tx.turned()
            # heard on commit by the other replicas that wait on these topics
            told = await ctx.replicas.send_in(q.conn, tx.notify, tx.close, tx.handed)
    finally:
        ctx.replicas.settled(told)  # its choice of topics is over, committed or not
