"""The Python client (`from gpufleet import Client`, docs/client.md) against a real
`gpufleet server` and a real `gpufleet worker`: found as the CLI finds the orchestrator,
submit, run with a workdir, wait, logs (followed), download, cancel; and a submit whose
answer is lost on the way sent again with its idempotency key, making one job."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet import Client
from gpufleet.domain.states import JobStatus
from gpufleet.errors import ConnectionFailed, NotFound
from tests.e2e.conftest import ServerProcess, WorkerProcess, serving, unique

LABELS = {"pool": "client"}
TRAIN = """\
import pathlib, sys
print("lr", sys.argv[1])
print("data:", pathlib.Path("data.txt").read_text().strip())
pathlib.Path("output").mkdir(exist_ok=True)
pathlib.Path("output/model.txt").write_text("weights " + sys.argv[1])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("client-orchestrator"))


@pytest.fixture(scope="module")
def worker(
    server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    agent = WorkerProcess(
        server, tmp_path_factory.mktemp("client-workers"), persistent=True, labels=LABELS
    )
    agent.start()
    yield agent
    agent.proc and agent.proc.send_signal(signal.SIGTERM)
    agent.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, server.admin_key) as made:
        yield made


def test_client_finds_the_orchestrator_and_its_key_as_the_cli_does(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPUFLEET_URL", "GPUFLEET_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(server.data_dir))
    with Client() as found:  # server.json's address, admin.token's key
        assert found.url == server.url
        assert found.get("/api/users/me")["name"] == "admin"
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(server.data_dir / "nowhere"))
    monkeypatch.setenv("GPUFLEET_URL", server.url)
    monkeypatch.setenv("GPUFLEET_API_KEY", server.admin_key)
    with Client() as named:
        assert named.url == server.url
        assert named.get("/api/users/me")["name"] == "admin"


def test_submit_wait_read_the_logs_and_cancel(client: Client, worker: WorkerProcess) -> None:
    code = "import sys\nfor i in range(3): print('line', i)\nsys.exit(3)"
    job = client.submit({"command": [sys.executable, "-c", code]}, worker_labels=LABELS)
    assert job.status in (JobStatus.QUEUED, JobStatus.OFFERED) and not job.idempotent_hit
    ended = job.wait(timeout=60)
    assert (ended.status, ended.exit_code, ended.ended) == (JobStatus.FAILED, 3, True)
    assert [line.text for line in ended.logs()] == ["line 0", "line 1", "line 2"]
    followed = ended.logs(follow=True)  # an ended job's stream: its lines, then its end
    assert [line.text for line in followed][-1] == "line 2"
    assert followed.status is JobStatus.FAILED
    waiting = client.submit({"command": ["true"]}, worker_labels={"pool": "nowhere"})
    assert waiting.cancel().status is JobStatus.CANCELLED
    with pytest.raises(TimeoutError):
        client.submit({"command": ["true"]}, worker_labels={"pool": "nowhere"}).wait(timeout=0.5)


def test_run_with_a_workdir_follows_its_log_and_downloads_its_files(
    client: Client, worker: WorkerProcess, tmp_path: Path
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    words = unique("words")
    (code / "data.txt").write_text(words)
    job = client.run(
        [sys.executable, "train.py", "3e-4"], workdir=code, worker_labels=LABELS, max_retries=0
    )
    logs = job.logs(follow=True)
    assert [line.text for line in logs] == ["lr 3e-4", f"data: {words}"]
    assert logs.status is JobStatus.COMPLETED
    saved = job.download(tmp_path / "home")
    assert [(s.record["path"], s.fetched) for s in saved] == [("output/model.txt", True)]
    assert (tmp_path / "home" / "output" / "model.txt").read_text() == "weights 3e-4"
    again = job.download(tmp_path / "home")  # there already with its sha256: left as it is
    assert [s.fetched for s in again] == [False]
    with pytest.raises(NotFound):
        job.download(tmp_path / "none", "nothing/**")


class DroppedAnswer(httpx.BaseTransport):
    """Sends each request to the orchestrator; the first submit's answer is lost on the way
    back (the connection drops after the orchestrator made the job)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.submits: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path == "/api/queue/submit":
            body = httpx.Response(200, content=request.content).json()
            self.submits.append(body.get("idempotency_key"))
            if len(self.submits) == 1:
                response.read()
                response.close()
                raise httpx.RemoteProtocolError("peer closed connection", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_a_submit_whose_answer_is_lost_is_sent_again_with_its_key_and_makes_one_job(
    server: ServerProcess,
) -> None:
    dropped = DroppedAnswer()
    name = unique("retried")
    config = {"command": ["true"], "name": name}
    with Client(server.url, server.admin_key, transport=dropped) as flaky:
        job = flaky.submit(config, worker_labels={"pool": "nowhere"})
        assert job.idempotent_hit is True  # the second try found the first's job
        assert len(dropped.submits) == 2 and dropped.submits[0] == dropped.submits[1]
        made = [
            e
            for e in flaky.get("/api/audit", type="job.submitted", limit=500)["events"]
            if e["detail"].get("idempotency_key") == dropped.submits[0]
        ]
        assert [e["target"] for e in made] == [job.id]
        job.cancel()
    once = DroppedAnswer()
    with Client(server.url, server.admin_key, transport=once, retries=0) as fragile:
        with pytest.raises(ConnectionFailed, match="failed"):
            fragile.submit(config, worker_labels={"pool": "nowhere"})
        assert once.submits == [None]  # not retried: no key was made for it


def test_a_sweep_through_the_client_runs_each_point_and_is_watched_as_one(
    client: Client, worker: WorkerProcess
) -> None:
    config = {"command": [sys.executable, "-c", "print('x is', {x})"]}
    key = unique("sweep-key")

    sweep = client.sweep(
        config, {"x": [1, 2]}, max_parallel=1, worker_labels=LABELS, idempotency_key=key
    )
    again = client.sweep(config, {"x": [1, 2]}, worker_labels=LABELS, idempotency_key=key)

    assert (sweep.size, sweep.max_parallel, sweep.idempotent_hit) == (2, 1, False)
    assert (again.id, again.idempotent_hit) == (sweep.id, True)
    ended = sweep.wait(timeout=60)
    assert (ended.status, ended.ended, ended.counts) == ("completed", True, {"completed": 2})
    assert [j.params for j in ended.jobs] == [{"x": 1}, {"x": 2}]
    lines = [line.text for line in client.job(ended.jobs[1].job_id).logs()]
    assert lines == ["x is 2"]
