"""In-process wake-ups: streams and followers wait on topics; transactions notify them.

Only wake-ups live here, never dispatch state: whoever wakes re-reads the database. With one
exception, for speed: a committed transaction may hand over the events it made for a topic
(the offer a claim wrote), so that the worker's stream sends them without reading back what
was just written. Any notification without events asks for a re-read, as before.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any


class Subscription:
    def __init__(self, hub: Hub, topic: str, *more: str) -> None:
        self.topic = topic
        self.topics = (topic, *more)
        self.fired: set[str] = set()  # topics notified since the last take_fired()
        # Since the last take_handed(): events handed over, and whether any notification
        # came without events (then what the subscriber waits for must be read again).
        self.handed: list[dict[str, Any]] = []
        self.plain = False
        self.event = asyncio.Event()
        self.closed = False
        self._hub = hub

    async def wait(self, seconds: float | None) -> bool:
        """Wait for a notification (`seconds` at most: None, no timer); False on timeout.
        Clears the flag for the next round."""
        if seconds is None:
            await self.event.wait()
        else:
            try:
                async with asyncio.timeout(seconds):
                    await self.event.wait()
            except TimeoutError:
                return False
        self.event.clear()
        return True

    def take_fired(self) -> set[str]:
        fired, self.fired = self.fired, set()
        return fired

    def take_handed(self) -> tuple[list[dict[str, Any]], bool]:
        """The events handed over, and whether to re-read, since the last call."""
        handed, plain = self.handed, self.plain
        self.handed, self.plain = [], False
        return handed, plain

    def close(self) -> None:
        self.closed = True
        self.event.set()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._hub.unsubscribe(self)


class Hub:
    def __init__(self) -> None:
        # Each topic's subscriptions in the order they came (a dict is an ordered set).
        self._subs: dict[str, dict[Subscription, None]] = defaultdict(dict)
        self._closed = False

    def subscribe(self, topic: str, *more: str) -> Subscription:
        """One subscription woken by a notification on any of the topics (closed already
        once the hub is: a stream opened during shutdown ends at once)."""
        sub = Subscription(self, topic, *more)
        for name in sub.topics:
            self._subs[name][sub] = None
        if self._closed:
            sub.close()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        for name in sub.topics:
            subs = self._subs.get(name)
            if subs is not None:
                subs.pop(sub, None)
                if not subs:
                    del self._subs[name]

    def notify(self, topic: str, events: list[dict[str, Any]] | None = None) -> None:
        """Wake the topic's subscribers; with `events`, hand them over (no re-read needed)."""
        for sub in self._subs.get(topic, ()):
            sub.fired.add(topic)
            if events:
                sub.handed.extend(events)
            else:
                sub.plain = True
            sub.event.set()

    def notify_all(self) -> None:
        """Wake every subscriber: what they wait for may have changed unheard."""
        for topic in list(self._subs):
            self.notify(topic)

    def close(self, topic: str) -> None:
        for sub in list(self._subs.get(topic, ())):
            sub.close()

    def close_all(self) -> None:
        """Shutdown has begun: close every subscription, now and from now on, so that every
        stream waiting on one ends (each loop runs while its subscription is open)."""
        self._closed = True
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.close()

    def close_oldest(self, topic: str, keep: int) -> int:
        """Close the topic's oldest open subscriptions but the newest `keep`; how many."""
        open_ = [sub for sub in self._subs.get(topic, ()) if not sub.closed]
        for sub in open_[: max(0, len(open_) - keep)]:
            sub.close()
        return max(0, len(open_) - keep)

    def count(self, prefix: str) -> int:
        """Topics with at least one subscriber, among those that start with `prefix`."""
        return sum(1 for name in self._subs if name.startswith(prefix))


WORKERS_TOPIC = "workers"  # the fleet changed: live views re-read it
JOBS_TOPIC = "jobs"  # some job changed: live views re-read the queue
FLEET_TOPIC = "fleet"  # a sample of the fleet over time was taken: its charts re-read
TEAMS_TOPIC = "teams"  # users, teams or their usage changed: live views re-read them
AUDIT_TOPIC = "audit"  # the audit log grew: the Audit page re-reads it
WEBHOOKS_TOPIC = "webhooks"  # a webhook delivery was queued or tried: its log is re-read
POOLS_TOPIC = "pools"  # a pool or one of its launches changed: the Capacity page re-reads
WORKER_TOPIC_PREFIX = "worker:"


def worker_topic(worker_id: str) -> str:
    """One worker's stream: its commands and offers."""
    return f"{WORKER_TOPIC_PREFIX}{worker_id}"


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


def key_topic(key_id: str) -> str:
    """Closed when the API key is revoked: every stream it opened (a web session's too) ends."""
    return f"key:{key_id}"


def session_topic(nonce: str) -> str:
    """Closed when a web session signs out: every stream it opened ends."""
    return f"session:{nonce}"
