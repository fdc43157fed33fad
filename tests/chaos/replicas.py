"""Several orchestrator replicas on one PostgreSQL database, used where a chaos fleet uses
one server (`conftest.Fleet`)."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import ServerProcess, start_replicas


class ReplicaSet:
    """Several orchestrator replicas on one PostgreSQL database, used where the fleet uses one
    server: clients (the submitter, the checks) talk to a replica that is up, and workers get
    every replica's URL, comma-separated, in an order of their own."""

    tls = False

    def __init__(self, root: Path, database_url: str, count: int, rng: random.Random) -> None:
        self.root = root
        self.database_url = database_url
        self.count = count
        self.rng = rng
        self.flags: dict[str, Any] = {}
        self.members: list[ServerProcess] = []

    def start(self) -> None:
        self.members = start_replicas(self.root, self.database_url, self.count, **self.flags)

    @property
    def url(self) -> str:
        urls = [m.url for m in self.members]
        self.rng.shuffle(urls)  # each worker starts on a replica of its own
        return ",".join(urls)

    def live(self) -> list[ServerProcess]:
        return [m for m in self.members if m.proc is not None and m.proc.poll() is None]

    def admin(self) -> httpx.Client:
        live = self.live()
        return (self.rng.choice(live) if live else self.members[0]).admin()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for member in self.members:
            member.kill(sig)
