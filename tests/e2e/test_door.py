"""Hostile bodies do not freeze the server (#31, finding 4): a real `gpufleet server` keeps
answering `/healthz` within 50 ms (p99) while three clients send it 4 MB bodies of two
million zeros, with and without credentials, to submit and to heartbeat.

Before the door, each such body was parsed and walked before authentication: 2.3 s for a
401, and `/healthz` at 3.6 s median under three clients. The one wall-clock assert the issue
asks for; a baseline measured first on the same server allows for a loaded machine.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import ServerProcess, serving
from tests.waiting import wait_until

HOSTILE = b"[" + b",".join([b"0"] * 2_000_000) + b"]"  # 4.0 MB, under the 4 MiB size limit
CLIENTS = 3
SAMPLES, PACE = 150, 0.01  # 10 ms apart, not 20: 1.5 s under attack a round, not 3 (#32)
# Five: a fresh-clone `make test` on a 2-vCPU Xeon VM missed three rounds of three (101, 62 and
# 84 ms) while the suite's other processes loaded both cores.
ROUNDS = 5
P99_BUDGET = 0.050


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("door"))


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


def healthz_times(url: str, count: int, pace: float, within: float = 30.0) -> list[float]:
    """Round trips of `/healthz` on one kept-alive connection, one every `pace` seconds,
    `count` of them or as many as come `within` seconds."""
    times: list[float] = []
    deadline = time.monotonic() + within
    with httpx.Client(base_url=url, timeout=10) as client:
        client.get("/healthz")
        while len(times) < count and time.monotonic() < deadline:
            start = time.perf_counter()
            answer = client.get("/healthz")
            times.append(time.perf_counter() - start)
            assert answer.status_code == 200
            time.sleep(pace)  # pacing: spread the samples over the hostile traffic
    return times


class Hostile(threading.Thread):
    """A client sending the 4 MB body to submit and heartbeat, with no credentials and with
    valid ones, in turn, until stopped; it keeps each answer's status and time."""

    def __init__(self, url: str, admin_key: str, worker_token: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.turns = [
            ("/api/queue/submit", {}),
            ("/api/workers/heartbeat", {}),
            ("/api/queue/submit", {"Authorization": f"Bearer {admin_key}"}),
            ("/api/workers/heartbeat", {"X-Worker-Token": worker_token}),
        ]
        self.answers: list[tuple[bool, int, float]] = []  # (with credentials, status, seconds)
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            turn = 0
            while not self.stop.is_set():
                path, headers = self.turns[turn % len(self.turns)]
                start = time.perf_counter()
                try:
                    answer = client.post(
                        path,
                        content=HOSTILE,
                        headers={"Content-Type": "application/json", **headers},
                    )
                except httpx.HTTPError as exc:  # a refusal must arrive, not a reset
                    self.errors.append(f"{path} {sorted(headers)}: {exc!r}")
                    continue
                self.answers.append(
                    (bool(headers), answer.status_code, time.perf_counter() - start)
                )
                turn += 1


def attack(server: ServerProcess, token: str) -> tuple[float, float, list[Hostile]]:
    """One round: `/healthz`'s p99 idle, then under the hostile clients, and the clients."""
    baseline = p99(healthz_times(server.url, 100, 0.01))
    clients = [Hostile(server.url, server.admin_key, token) for _ in range(CLIENTS)]
    for client in clients:
        client.start()
    try:
        wait_until(lambda: all(c.answers for c in clients), timeout=30, message="hostile answers")
        attacked = p99(healthz_times(server.url, SAMPLES, PACE))
    finally:
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(timeout=30)
    return baseline, attacked, clients


def test_healthz_stays_under_50_ms_p99_while_hostile_bodies_arrive(server: ServerProcess) -> None:
    with server.admin() as admin:
        created = admin.post("/api/admin/workers", json={"name": "door-gpu"})
        assert created.status_code == 201, created.text
    rounds = []
    for _ in range(ROUNDS):  # a round spoilt by other work on the machine is measured again
        baseline, attacked, clients = attack(server, created.json()["token"])
        assert [e for c in clients for e in c.errors] == []
        answers = [a for c in clients for a in c.answers]
        anonymous = sorted(seconds for signed, _, seconds in answers if not signed)
        assert {status for signed, status, _ in answers if not signed} <= {401, 429}
        assert {status for signed, status, _ in answers if signed} == {413}  # 2,000,001 values
        assert len(anonymous) >= 3
        assert anonymous[len(anonymous) // 2] < 0.5, anonymous  # was 2.3 s each
        # 50 ms, unless the machine is so loaded that even the idle server's p99 is past
        # 12.5 ms (other tests on two shared cores): then four times that. Before: seconds.
        budget = max(P99_BUDGET, 4 * baseline)
        rounds.append(
            f"p99 {attacked * 1000:.1f} ms (baseline {baseline * 1000:.1f} ms, "
            f"budget {budget * 1000:.1f} ms)"
        )
        if attacked < budget:
            return
    raise AssertionError(f"/healthz under hostile bodies, each round: {rounds}")
