"""Which topics the other replicas wait on: a write transaction NOTIFYs only those (#39).

A topic's class is its name up to the first ':' (`worker`, `job`, `jobs`, `audit`, …). Each
replica tells the others the classes its streams wait on: all of them when its link comes
up (asking theirs: `hello`), and again whenever a class gets its first subscriber. A class
that loses its last subscriber leaves at the next such announcement: until then the others
send a little more than needed, never less. Closing a stream (a key revoked, a session
signed out) always travels.

An announcement cannot reach the others at once: a transaction of another replica that
chose its topics before it heard may commit afterwards, unheard. So each replica answers an
announcement only once every transaction that chose before it heard is over, and the
announcer wakes its streams of the announced classes on each answer: they read again what
they wait for, and from then on that replica's commits reach them. While this replica's
link is down it knows nothing of the others and sends every topic, as before.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

_KEEP_VERSIONS = 8  # announced class sets kept, for the answers still to come


def topic_class(topic: str) -> str:
    return topic.partition(":")[0]


class Interest:
    """One replica's view of the others' interests, and what it has to say about its own."""

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        self.linked = False
        self.outbox: list[str] = []  # announcements and answers, for the link to send
        self.due = asyncio.Event()  # set when the outbox holds something
        self._peers: dict[str, frozenset[str]] = {}
        self._generation = 0  # announcements heard so far
        self._open: Counter[int] = Counter()  # transactions choosing at each generation
        self._answers: list[tuple[int, str, int]] = []  # (generation, announcer, version)
        self._version = 0
        self._announced: dict[int, frozenset[str]] = {}

    # ---- sending topics ------------------------------------------------------------------

    def wanted(self, topic: str) -> bool:
        """Whether another replica may wait on `topic` (every topic while unlinked)."""
        if not self.linked:
            return True
        kind = topic_class(topic)
        return any(kind in classes for classes in self._peers.values())

    def heard_from(self, instance_id: str) -> bool:
        """Whether this replica knows what `instance_id` waits on."""
        return instance_id in self._peers

    def choosing(self) -> int:
        """A transaction chooses its topics now; `settled` with the token once it is over."""
        self._open[self._generation] += 1
        return self._generation

    def settled(self, token: int) -> None:
        self._open[token] -= 1
        if self._open[token] <= 0:
            del self._open[token]
        self._answer_due()

    # ---- announcements ------------------------------------------------------------------

    def announce(self, classes: Iterable[str], *, hello: bool = False) -> None:
        """Tell the others the classes this replica's streams wait on."""
        self._version += 1
        wanted = frozenset(classes)
        self._announced[self._version] = wanted
        self._announced.pop(self._version - _KEEP_VERSIONS, None)
        body: dict[str, Any] = {"i": sorted(wanted), "v": self._version}
        if hello:
            body["h"] = 1
        self._say(body)

    def heard_announcement(self, origin: str, message: dict[str, Any]) -> bool:
        """Another replica's classes; True when it asks for this replica's (a hello)."""
        self._peers[origin] = frozenset(str(c) for c in message.get("i", ()))
        self._generation += 1
        self._answers.append((self._generation, origin, int(message.get("v", 0))))
        self._answer_due()
        return bool(message.get("h"))

    def answered(self, message: dict[str, Any]) -> frozenset[str] | None:
        """The classes to wake, when `message` answers one of this replica's announcements."""
        if message.get("a") != self.instance_id:
            return None
        return self._announced.get(int(message.get("v", 0)), frozenset())

    def _answer_due(self) -> None:
        """Answer each announcement once no transaction that chose before it is open."""
        oldest = min(self._open, default=None)
        ready = [a for a in self._answers if oldest is None or oldest >= a[0]]
        if not ready:
            return
        self._answers = [a for a in self._answers if a not in ready]
        for _generation, origin, version in ready:
            self._say({"a": origin, "v": version})

    def _say(self, body: dict[str, Any]) -> None:
        if self.linked:
            self.outbox.append(orjson.dumps({"o": self.instance_id, **body}).decode())
            self.due.set()

    # ---- the link ------------------------------------------------------------------------

    def link_up(self, classes: Iterable[str]) -> None:
        self.linked = True
        self.outbox.clear()
        self.announce(classes, hello=True)

    def link_down(self) -> None:
        """What it heard may be stale now: it sends everything until the link is back."""
        self.linked = False
        self._peers.clear()
        self._answers.clear()
        self.outbox.clear()

    def keep_only(self, alive: set[str]) -> None:
        """Forget the replicas whose link is gone (they say hello when it is back)."""
        for gone in set(self._peers) - alive:
            del self._peers[gone]
