"""A real `gpufleet worker` handed every malformed offer directly, by a small fake
orchestrator that skips the real one's checks at submit: it reports each one it can name
`failed`, lives on, and runs the next good job (issue #14: one job killed every worker)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import GPUFLEET, unique
from tests.offers import GOOD_COMMAND, NOT_EVENTS, nameless_offers, unrunnable_offers

Report = tuple[str, dict[str, Any]]  # (path, body)


class FakeOrchestrator(ThreadingHTTPServer):
    """The worker endpoints of docs/protocol.md, answering OK to everything; the stream sends
    what the test puts in `events` (raw `data:` text)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.events: queue.Queue[str | None] = queue.Queue()
        self.reports: list[Report] = []
        self.changed = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def send(self, event: dict[str, Any]) -> None:
        self.events.put(json.dumps(event))

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self.changed:
            self.reports.append((path, body))
            self.changed.notify_all()

    def wait_for(self, wanted: Report, after: int = 0, timeout: float = 20) -> int:
        """The index of the first report past `after` with the wanted path and fields."""
        with self.changed:
            # `is not None`: the first report has index 0, which would read as not found yet
            self.changed.wait_for(lambda: self._find(wanted, after) is not None, timeout)
            found = self._find(wanted, after)
        if found is None:
            raise AssertionError(f"no {wanted} within {timeout} s; got {self.reports}")
        return found

    def _find(self, wanted: Report, after: int) -> int | None:
        path, fields = wanted
        for n, (p, body) in enumerate(self.reports[after:], start=after):
            if p == path and fields.items() <= body.items():
                return n
        return None

    def statuses(self, job_id: str) -> list[dict[str, Any]]:
        return [b for p, b in self.reports if p == f"/api/workers/job/{job_id}/status"]


class Handler(BaseHTTPRequestHandler):
    server: FakeOrchestrator

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.record(self.path, body)
        answer = {"ok": True, "status": "idle", "draining": False}
        if self.path == "/api/workers/register":
            answer = {"worker_id": "w_fake", "name": body["name"], "heartbeat_interval": 30}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"type": "connected", "worker_id": "w_fake"}\n\n')
        self.wfile.flush()
        while (data := self.server.events.get()) is not None:
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[FakeOrchestrator]:
    server = FakeOrchestrator()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.events.put(None)
    server.shutdown()
    server.server_close()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(fake: FakeOrchestrator, *, persistent: bool) -> subprocess.Popen[bytes]:
        cmd = [GPUFLEET, "worker", "-v", "--orchestrator-url", fake.url]
        cmd += ["--worker-token", "wt_fake", "--name", unique("agent")]
        cmd += ["--work-dir", str(tmp_path / "work")]
        cmd += ["--persistent"] if persistent else []
        with (tmp_path / "worker.log").open("ab") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        fake.wait_for(("/api/workers/register", {}))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_persistent_worker_survives_every_malformed_offer_then_runs_a_good_job(
    fake: FakeOrchestrator, start_worker: Any, tmp_path: Path
) -> None:
    worker = start_worker(fake, persistent=True)

    for case, event in unrunnable_offers():
        fake.send(event)
        failed = fake.wait_for((f"/api/workers/job/{event['job_id']}/status", {"status": "failed"}))
        fake.wait_for(("/api/workers/heartbeat", {"status": "idle"}), after=failed)
        reports = fake.statuses(event["job_id"])
        assert [r["status"] for r in reports] == ["acknowledged", "failed"], case
        assert reports[-1]["attempt_id"] == event["attempt_id"], case
        assert reports[-1]["error"].startswith("could not start: "), (case, reports[-1])
        assert worker.poll() is None, (case, (tmp_path / "worker.log").read_text()[-3000:])
    for event in nameless_offers():
        fake.send(event)
    for data in NOT_EVENTS:
        fake.events.put(data)
    good = {"type": "job_submit", "job_id": "j_good", "attempt_id": "a_good"}
    fake.send({**good, "config": {}, "command": GOOD_COMMAND, "env": {"OK": "1"}})

    fake.wait_for(("/api/workers/job/j_good/status", {"status": "completed"}))
    assert worker.poll() is None
    assert not fake.statuses("j_nameless")


def test_an_ephemeral_worker_reports_a_malformed_offer_failed_and_exits_cleanly(
    fake: FakeOrchestrator, start_worker: Any
) -> None:
    worker = start_worker(fake, persistent=False)
    event = dict(unrunnable_offers())["env name with ="]

    fake.send(event)

    assert worker.wait(timeout=20) == 0
    assert [r["status"] for r in fake.statuses(event["job_id"])] == ["acknowledged", "failed"]
    assert fake.reports[-1][0] == "/api/workers/disconnect"
