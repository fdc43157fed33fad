"""What a worker's stream sends, and when: its commands, its offers (sent again until
acknowledged), a gang node's start, pings; offers and starts as the transaction that made
them hands them over, on this replica or, in a NOTIFY payload, from another.

One stream per worker: the newest wins, on any replica (`stream_owner` says which). Every
wake-up without handed events reads the database for what waits (commands, offers, a start
this stream has not sent); so does a quiet stream when an offer is due again.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpufleet import protocol
from gpufleet.domain.matching import Feature
from gpufleet.domain.records import Attempt, Worker
from gpufleet.protocol import Event, EventType
from gpufleet.server import sse
from gpufleet.server.context import Context
from gpufleet.server.hub import Subscription, worker_topic
from gpufleet.server.services import agents
from gpufleet.server.services.offers import pending as pending_offers
from gpufleet.server.services.offers import pending_start

T = TypeVar("T")
STREAM_CLOSE_SECONDS = 5.0
# An agent that names no attempt (the released SimpleTuner agent) must not see an offer the
# moment its previous job ends: it still runs that job's monitor, which reports the killed
# process's exit as whatever job is current by then (the new one), and forgets it.
LEGACY_OFFER_HOLD = 0.5
FIRST_RESEND = 1.0  # an offer that arrived while the worker was still reporting its last job


@dataclass(slots=True)
class OfferPacing:
    """The offers a stream holds for its worker until acknowledged, and when each goes out.

    The first send waits `hold` (0 for an agent that names attempts); then, while the offer
    waits for its acknowledgement, it goes again after `first_resend` (the SimpleTuner agent,
    and ours before it kept one for later, ignore an offer that comes while still reporting
    their last job) and every `resend` after.
    """

    hold: float
    first_resend: float
    resend: float
    offers: dict[str, Event] = field(default_factory=dict)  # attempt id → offer
    due: dict[str, float] = field(default_factory=dict)  # attempt id → when it goes (again)
    sent: set[str] = field(default_factory=set)

    @classmethod
    def for_worker(cls, ack_timeout: float, worker: Worker) -> OfferPacing:
        resend = ack_timeout / 3
        hold = 0.0 if Feature.ATTEMPTS in worker.features else LEGACY_OFFER_HOLD
        return cls(hold=hold, first_resend=min(FIRST_RESEND, resend), resend=resend)

    def add(self, offer: Event, now: float) -> None:
        """An offer handed over by the claim that made it."""
        self.offers[offer["attempt_id"]] = offer
        self.due.setdefault(offer["attempt_id"], now + self.hold)

    def replace(self, offers: dict[str, Event], now: float) -> None:
        """The offers still waiting, as the database has them; the others are forgotten."""
        self.offers = offers
        for attempt_id in offers:
            self.due.setdefault(attempt_id, now + self.hold)
        for attempt_id in self.due.keys() - offers.keys():
            del self.due[attempt_id]
            self.sent.discard(attempt_id)

    def must_read(self, now: float) -> bool:
        """A resend is due: the database says first whether the offer still waits."""
        return any(now >= at and attempt_id in self.sent for attempt_id, at in self.due.items())

    def take_due(self, now: float) -> list[Event]:
        """The offers to send now; each is then due again after its resend delay."""
        out = [attempt_id for attempt_id, at in self.due.items() if now >= at]
        for attempt_id in out:
            again = self.resend if attempt_id in self.sent else self.first_resend
            self.due[attempt_id] = now + again
            self.sent.add(attempt_id)
        return [self.offers[attempt_id] for attempt_id in out]

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)


class WorkerStream:
    """One worker's open stream. `open` makes it the worker's stream; `events` is its body,
    which ends when the subscription closes (a newer stream, a rotated token, shutdown) or
    the database says the stream is no longer the worker's."""

    def __init__(self, ctx: Context, worker: Worker, owner: str, sub: Subscription) -> None:
        self._ctx = ctx
        self._worker = worker
        self._owner = owner
        self._sub = sub
        self._pacing = OfferPacing.for_worker(ctx.settings.ack_timeout, worker)
        self._started: set[str] = set()  # the attempts whose `job_start` this stream sent

    @classmethod
    async def open(cls, ctx: Context, worker: Worker, claimed_id: str | None) -> WorkerStream:
        agents.check_self(worker, claimed_id)
        owner = f"{ctx.instance_id}:{secrets.token_hex(4)}"
        ctx.hub.close(worker_topic(worker.id))  # one stream per worker: the newest wins
        sub = ctx.hub.subscribe(worker_topic(worker.id))
        try:
            await agents.stream_opened(ctx, worker, owner)
        except BaseException:
            ctx.hub.unsubscribe(sub)
            raise
        return cls(ctx, worker, owner, sub)

    async def events(self) -> AsyncIterator[bytes]:
        now = asyncio.get_running_loop().time
        handed: list[Event] = []
        reread = True  # the first round reads what waits for the worker
        keepalive = self._ctx.keepalive
        quiet = keepalive.join(self._sub.event.set)
        try:
            with self._sub:
                yield self._frame(protocol.connected(self._worker.id))
                keepalive.wrote(quiet)
                while not self._sub.closed:
                    for event in self._sort_handed(handed, now()):
                        yield self._frame(event)  # a start, sent as handed over
                        keepalive.wrote(quiet)
                    if reread or self._pacing.must_read(now()):
                        pending = await asyncio.shield(self._uncut(self._pending()))
                        if pending is None:
                            break  # a newer stream took over, or the worker went offline
                        commands, offers = pending
                        self._pacing.replace(offers, now())
                        for event in commands:
                            yield self._frame(event)
                            keepalive.wrote(quiet)
                    for offer in self._pacing.take_due(now()):
                        yield self._frame(offer)
                        keepalive.wrote(quiet)
                    # Woken by a change, when an offer is due, or by the keep-alive clock
                    # (`sse.KeepAlive`: one timer for every stream, none of the stream's own).
                    due = self._pacing.next_due()
                    await self._sub.wait(None if due is None else max(0.0, due - now()))
                    handed, reread = self._sub.take_handed()
                    if quiet.due and not self._sub.closed:
                        yield sse.PING
                        keepalive.wrote(quiet)
        finally:
            keepalive.leave(quiet)
            # A task of its own, so the cancel that ends the stream does not cancel the
            # close, and nothing here holds off a cancel (no shielding): a shutdown never
            # waits on it for more than a moment (startup clears stale owners anyway).
            closing = self._uncut(agents.stream_closed(self._ctx, self._worker.id, self._owner))
            await asyncio.wait({closing}, timeout=STREAM_CLOSE_SECONDS)

    def _sort_handed(self, handed: list[Event], now: float) -> list[Event]:
        """The handed-over events to send now (a start, each time one is handed over: a
        repeated acknowledgement asks for it again); offers go to their pacing."""
        out = []
        for event in handed:
            if protocol.event_type(event) is EventType.JOB_START:
                self._started.add(event["attempt_id"])
                out.append(event)
            else:
                self._pacing.add(event, now)
        return out

    @staticmethod
    def _frame(event: Event) -> bytes:
        return sse.frame(event, event=event["type"])

    def _uncut(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A stream's database calls run as tasks of their own: the cancel that ends a stream
        (its client left) must not cut one off midway, which can leave the SQLite driver
        waiting forever on the connection it then closes. Shutdown waits for them."""
        return self._ctx.stream_calls.start(coro)

    async def _pending(self) -> tuple[list[Event], dict[str, Event]] | None:
        """What to send now (a gang node's start this stream has not sent, then queued
        commands: cancel, drain, shutdown), and the offers waiting for the worker's
        acknowledgement (attempt id → event; `OfferPacing` says when each goes); None once
        the stream is no longer the worker's (a newer one took over, maybe on another
        replica, or the worker went offline): the stream ends."""
        worker_id = self._worker.id
        send: list[Event] = []
        async with self._ctx.store.read() as q:
            worker = await q.get_worker(worker_id)
            if worker is None or worker.stream_owner != self._owner:
                return None
            waiting = await q.has_events(worker_id)
            held = start = None
            gang = Feature.GANG in worker.features  # only such a worker is a gang's node
            if worker.current_attempt_id and (waiting or gang):  # to drop a cancel; its start
                held = await q.get_attempt(worker.current_attempt_id)
            if gang:
                start = await pending_start(q, worker, held)
            offers = await pending_offers(
                q, self._ctx.audit_key, worker, self._ctx.settings.worker_url()
            )
        if start is not None and start["attempt_id"] not in self._started:
            self._started.add(start["attempt_id"])
            send.append(start)
        if waiting:  # a write only when there is something to take
            async with self._ctx.store.write() as wq:
                commands = await wq.take_events(worker_id)
            send += [cmd for cmd in commands if _cancel_applies(cmd, held)]
        return send, offers


def _cancel_applies(cmd: Event, held: Attempt | None) -> bool:
    """Whether a queued `job_cancel` may still go out: only about the job the worker holds
    now (its attempt, if the cancel names one), or when it holds none. The SimpleTuner agent
    stops whatever it runs on any `job_cancel`, so one about an earlier job would stop the
    next."""
    if protocol.event_type(cmd) is not EventType.JOB_CANCEL or held is None:
        return True
    if cmd.get("job_id") != held.job_id:
        return False
    return cmd.get("attempt_id") in (None, held.id)


async def finish_calls(ctx: Context) -> None:
    """At shutdown, before the database goes: let the streams' last calls finish."""
    await ctx.stream_calls.finish(STREAM_CLOSE_SECONDS)
