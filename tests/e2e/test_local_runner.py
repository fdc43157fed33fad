"""The orchestrator's embedded local runner, and `make up` on a fresh data folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import FakeWorker, ServerProcess, free_port, unique
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("local"), None, **{"local-gpus": "auto", "heartbeat-interval": 0.5}
    )
    proc.start()
    with proc.admin() as admin:
        wait_until(
            lambda: admin.get("/api/admin/workers/w_local").json().get("status") == "idle",
            timeout=15,
            message="the local runner to be idle",
        )
    yield proc
    proc.kill(signal.SIGTERM)


def _run(server: ServerProcess, **body: object) -> dict[str, object]:
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=body)
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        return dict(
            wait_until(
                lambda: (
                    (j := admin.get(f"/api/queue/{job_id}").json())["status"]
                    in ("completed", "failed")
                    and j
                ),
                timeout=15,
                message="the job to end",
            )
        )


def test_a_local_job_runs_on_the_orchestrators_own_runner(local_server: ServerProcess) -> None:
    job = _run(local_server, config={"command": ["python", "-c", "print(6 * 7)"]}, target="local")
    assert job["status"] == "completed" and job["worker_id"] == "w_local"
    with local_server.admin() as admin:
        lines = admin.get(f"/api/queue/{job['id']}/logs").json()["lines"]
    assert [line["text"] for line in lines] == ["42"]


def test_an_auto_job_prefers_an_idle_remote_worker_and_falls_back_to_local(
    local_server: ServerProcess,
) -> None:
    tag = {"pool": unique("p")}
    remote = FakeWorker(local_server, unique("w"), labels=tag)
    remote.register(gpu_count=0)
    remote.keep_alive()
    stream = remote.connect()
    with local_server.admin() as admin:
        first = admin.post(
            "/api/queue/submit", json={"config": {"command": ["true"]}, "target": "auto"}
        ).json()
    assert stream.next("job_submit")["job_id"] == first["id"]  # the remote one was idle
    fallback = _run(local_server, config={"command": ["true"]}, target="auto")
    assert fallback["worker_id"] == "w_local"  # the remote one is busy now
    remote.close()


def test_the_local_runner_gets_a_fresh_token_at_every_start(local_server: ServerProcess) -> None:
    local_server.kill(signal.SIGTERM)
    local_server.start()
    with local_server.admin() as admin:
        wait_until(
            lambda: admin.get("/api/admin/workers/w_local").json().get("status") == "idle",
            timeout=15,
            message="the local runner back after a restart",
        )
    assert _run(local_server, config={"command": ["true"]}, target="local")["status"] == "completed"


def test_make_up_serves_a_fresh_checkout_ready_for_a_job(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "DATA": str(tmp_path / "data"),
        "BIN": str(Path(sys.executable).parent),
    }
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "up.sh")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "gpufleet is up" in line:
                break
        else:
            raise AssertionError("make up never said it was up:\n" + "".join(seen))
        key = (tmp_path / "data" / "admin.token").read_text().strip()
        server = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        job = server.post(
            "/api/queue/submit", json={"config": {"command": ["echo", "hello"]}, "target": "local"}
        ).json()
        done = wait_until(
            lambda: server.get(f"/api/queue/{job['id']}").json()["status"] == "completed",
            timeout=15,
            message="the first job to complete",
        )
        assert done
        server.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=20)
        assert proc.stdout is not None
        proc.stdout.close()
