"""Several `gpufleet server` replicas on one PostgreSQL database (docs/deploy.md).

Each replica is a real process with its own data folder; they share the database and, as the
deployment guide says, the admin key, the audit key and the web UI secret. A worker's stream
may live on one replica while jobs are submitted on another; the sweeps run on exactly one.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import fresh_database
from tests.e2e.conftest import (
    GPUFLEET,
    FakeWorker,
    ServerProcess,
    start_replicas,
    unique,
)
from tests.e2e.fake_gang import GANG_FEATURES, PORT
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def shared_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """Two replicas for the module's tests (each its own workers and labels): all leave both
    running but the last to use them, which kills one (two more replicas are two more
    CPU-seconds of starts, #32)."""
    with fresh_database() as url:
        started = start_replicas(tmp_path_factory.mktemp("replicas"), url, 2)
        yield started
        for replica in started:
            replica.kill(signal.SIGTERM)


def metric(replica: ServerProcess, name: str) -> float:
    with replica.admin() as admin:
        text = admin.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the metrics of {replica.url}")


def leaders(replicas: list[ServerProcess]) -> list[ServerProcess]:
    return [r for r in replicas if r.proc is not None and metric(r, "gpufleet_replica_leader")]


def worker_on(
    replica: ServerProcess, created_on: ServerProcess, labels: dict[str, str], **registration: Any
) -> FakeWorker:
    """A worker created through one replica that registers, heartbeats and streams on
    another (the created_on replica may be the same)."""
    worker = FakeWorker(created_on, unique("w"), labels=labels)
    worker.server = replica
    worker.register(**registration)
    worker.keep_alive()
    worker.connect()
    return worker


def submit(replica: ServerProcess, labels: dict[str, str]) -> str:
    with replica.admin() as admin:
        answer = admin.post(
            "/api/queue/submit",
            json={"config": {"command": ["true"]}, "target": "worker", "worker_labels": labels},
        )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def job(replica: ServerProcess, job_id: str) -> dict[str, object]:
    with replica.admin() as admin:
        answer = admin.get(f"/api/queue/{job_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_job_submitted_on_one_replica_reaches_a_worker_streaming_from_another(
    shared_replicas: list[ServerProcess],
) -> None:
    a, b = shared_replicas
    labels = {"pool": unique("p")}
    worker = worker_on(b, a, labels)
    try:
        job_id = submit(a, labels)
        assert worker.stream is not None
        # Within the acknowledgement timeout (3 s): only a wake-up from the other replica
        # (LISTEN/NOTIFY) sends it; a quiet stream does not poll the database.
        offer = worker.stream.next("job_submit", timeout=2.5)
        assert offer["job_id"] == job_id

        for status in ("acknowledged", "running", "completed"):
            answer = worker.report(job_id, status, attempt_id=offer["attempt_id"])
            assert answer.status_code == 200, answer.text
        assert job(b, job_id)["status"] == "completed"
        assert job(a, job_id)["status"] == "completed"
    finally:
        worker.close()


def test_a_gangs_offers_and_starts_reach_nodes_streaming_from_either_replica(
    shared_replicas: list[ServerProcess],
) -> None:
    """Each node's offer and `job_start` are handed over in the NOTIFY of the transaction
    that made them (#35): the start of the node streaming from b, made by its peer's last
    acknowledgement on a, reaches it from a's commit, as its offer did from a's submit."""
    a, b = shared_replicas
    labels = {"pool": unique("g")}
    on_a, on_b = (worker_on(r, a, labels, features=GANG_FEATURES) for r in (a, b))
    try:
        with a.admin() as admin:
            answer = admin.post(
                "/api/queue/submit",
                # Offers too long for one NOTIFY payload together: they go in several.
                json={
                    "config": {"command": ["true"], "nodes": 2, "env": {"PAD": "x" * 4000}},
                    "worker_labels": labels,
                    "priority": 1000,
                },
            )
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        nodes = (on_b, on_a)  # the node on a acknowledges last: a's commit starts both
        offers = []
        for node in nodes:
            assert node.stream is not None
            offers.append(node.stream.next("job_submit", timeout=2.5))
        for node, offer in zip(nodes, offers, strict=True):
            rank = offer["node_rank"]
            body = {"node_rank": rank, **({"port": PORT} if rank == 0 else {})}
            answer = node.report(job_id, "acknowledged", attempt_id=offer["attempt_id"], **body)
            assert answer.status_code == 200, answer.text
        # Within the worker's own second acknowledgement (5 s), which would fetch it too.
        starts = [n.stream.next("job_start", timeout=2.5) for n in nodes if n.stream]
        assert sorted(s["node_rank"] for s in starts) == [0, 1]
        ranked = sorted(zip(offers, nodes, strict=True), key=lambda on: -on[0]["node_rank"])
        for status in ("running", "completed"):  # rank 0's end last: it is the job's
            for offer, node in ranked:
                answer = node.report(
                    job_id, status, attempt_id=offer["attempt_id"], node_rank=offer["node_rank"]
                )
                assert answer.status_code == 200, answer.text
        assert job(b, job_id)["status"] == "completed"
    finally:
        on_a.close()
        on_b.close()


def test_a_newer_stream_on_another_replica_ends_the_older_one(
    shared_replicas: list[ServerProcess],
) -> None:
    a, b = shared_replicas
    worker = worker_on(a, a, {"pool": unique("p")})
    try:
        first = worker.stream
        assert first is not None
        worker.server = b
        worker.connect()

        wait_until(
            first.closed.is_set, timeout=5, message="the older stream, on the other replica, to end"
        )
        with b.admin() as admin:
            record = admin.get(f"/api/admin/workers/{worker.id}").json()
        assert record["status"] == "idle"
    finally:
        first.close()
        worker.close()


def test_a_session_signed_out_on_one_replica_is_refused_by_the_other(
    shared_replicas: list[ServerProcess],
) -> None:
    a, b = shared_replicas
    signed_in = httpx.post(f"{a.url}/ui/session", json={"api_key": a.admin_key}, timeout=10)
    assert signed_in.status_code == 200, signed_in.text
    cookie = {"Cookie": f"gpufleet_session={signed_in.cookies['gpufleet_session']}"}
    csrf = {"X-CSRF-Token": signed_in.cookies["gpufleet_csrf"]}
    with httpx.Client(base_url=b.url, headers=cookie, timeout=10) as on_b:
        assert on_b.get("/api/queue").status_code == 200
        with on_b.stream("GET", "/api/events", timeout=httpx.Timeout(10, read=5)) as events:
            assert events.status_code == 200
            lines = events.iter_lines()
            assert any('"hello"' in line for line in lines)  # the stream is open

            signed_out = httpx.delete(f"{a.url}/ui/session", headers=cookie | csrf, timeout=10)
            assert signed_out.status_code == 200, signed_out.text

            # Refused by the other replica at once (it reads the same database), and the
            # stream the session opened there ends (the sign-out is heard through NOTIFY).
            assert on_b.get("/api/queue").status_code == 401
            page = on_b.get("/queue")
            assert page.status_code == 303 and page.headers["location"].startswith("/signin")
            # Ends when the server closes it (a read timeout fails the test); a nudge sent
            # before the close may come first, but never the stream's hello again.
            rest = list(lines)
        assert not any('"hello"' in line for line in rest), rest


def test_one_replica_runs_the_sweeps_and_another_takes_over_when_it_dies(
    shared_replicas: list[ServerProcess],
) -> None:
    replicas = shared_replicas  # the last test on them: it kills one
    wait_until(lambda: len(leaders(replicas)) == 1, timeout=10, message="one replica to lead")
    assert metric(replicas[0], "gpufleet_replicas") == 2
    leader = leaders(replicas)[0]
    survivor = next(r for r in replicas if r is not leader)
    labels = {"pool": unique("p")}
    # One worker streams from the doomed leader and heartbeats to the survivor; a second
    # one, silent, must still be swept after the leader is gone.
    streaming = worker_on(survivor, survivor, labels)
    assert streaming.stream is not None
    streaming.stream.close()
    streaming.server = leader
    doomed = streaming.connect()
    streaming.server = survivor
    silent = FakeWorker(survivor, unique("silent"))
    silent.server = survivor
    silent.register()
    try:
        leader.kill(signal.SIGKILL)

        wait_until(lambda: leaders([survivor]) == [survivor], timeout=10, message="a new leader")
        assert metric(survivor, "gpufleet_replicas") == 1
        with survivor.admin() as admin:
            # The dead replica's stream is known gone: the worker waits for a new one.
            wait_until(
                lambda: (
                    admin.get(f"/api/admin/workers/{streaming.id}").json()["status"] == "connecting"
                ),
                timeout=10,
                message="the stream of the dead replica to be cleared",
            )
            # The heartbeat sweep runs on the survivor now.
            wait_until(
                lambda: admin.get(f"/api/admin/workers/{silent.id}").json()["status"] == "offline",
                timeout=15,
                message="the silent worker to be marked offline by the new leader",
            )
        doomed.close()
        streaming.connect()
        job_id = submit(survivor, labels)
        assert streaming.stream is not None
        assert streaming.stream.next("job_submit", timeout=5)["job_id"] == job_id
    finally:
        streaming.close()
        silent.close()


def test_replicas_starting_together_on_an_empty_database_mint_one_admin_key(
    tmp_path: Path, pg_database: str
) -> None:
    servers = [ServerProcess(tmp_path / f"r{n}", pg_database) for n in range(2)]
    procs = []
    try:
        for server in servers:  # started at once, not one after the other
            server.data_dir.mkdir(parents=True)
            cmd = [GPUFLEET, "server", "--port", str(server.port), "--data-dir"]
            cmd += [str(server.data_dir), "--database-url", pg_database]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        for server in servers:
            wait_until(lambda s=server: _serves(s), timeout=30, message=f"{server.url} to serve")
        minted = [s for s in servers if (s.data_dir / "admin.token").exists()]
        assert len(minted) == 1
        with minted[0].admin() as admin:
            keys = admin.get("/api/admin/api-keys").json()
        assert [k["name"] for k in keys] == ["admin"]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)


def _serves(server: ServerProcess) -> bool:
    try:
        return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
