"""A real `gpufleet server` stops cleanly and promptly, event streams open or not."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from tests.e2e.conftest import (
    GPUFLEET,
    EventReader,
    FakeWorker,
    ServerProcess,
    unique,
)
from tests.waiting import wait_until

# uvicorn waits this long for open connections before it cancels them (cli/server.py).
GRACEFUL_SHUTDOWN_SECONDS = 3.0


def _follow(url: str, headers: dict[str, str], opened: threading.Event) -> threading.Thread:
    """Hold an SSE response open on a thread until the server ends it."""

    def read() -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=None)):
                opened.set()
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_sigterm_with_open_streams_ends_them_and_exits_at_once_without_an_error(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    worker = None
    try:
        worker = FakeWorker(server, unique("w"))
        worker.register()
        stream: EventReader = worker.connect()
        with server.admin() as admin:
            job = admin.post("/api/queue/submit", json={"config": {}, "worker_labels": {"x": "y"}})
            assert job.status_code == 201, job.text
        auth = {"Authorization": f"Bearer {server.admin_key}"}
        followers = []
        for path in ("/api/events", f"/api/queue/{job.json()['id']}/logs?follow=true"):
            opened = threading.Event()
            followers.append(_follow(f"{server.url}{path}", auth, opened))
            assert opened.wait(10), path
        assert server.proc is not None

        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=15)
        took = time.monotonic() - started

        wait_until(stream.closed.is_set, timeout=5, message="the worker's stream to end")
        for thread in followers:
            thread.join(timeout=5)
            assert not thread.is_alive()
    finally:
        if worker is not None:
            worker.close()
        server.kill()
    log = server.log_path.read_text()
    assert code in (0, -signal.SIGTERM), log[-3000:]
    assert took < GRACEFUL_SHUTDOWN_SECONDS - 0.5, f"{took:.1f} s\n{log[-3000:]}"
    assert "ERROR" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_following_logs_through_a_shutdown_ends_in_one_line_that_says_so(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    try:
        with server.admin() as admin:
            job = admin.post("/api/queue/submit", json={"config": {}, "worker_labels": {"x": "y"}})
        job_id = job.json()["id"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env.update(GPUFLEET_URL=server.url, GPUFLEET_API_KEY=server.admin_key, NO_COLOR="1")
        follower = subprocess.Popen(
            [GPUFLEET, "jobs", "logs", job_id, "-f"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(
            lambda: f"/api/queue/{job_id}/logs?follow=true" in server.log_path.read_text(),
            timeout=15,
            message="the CLI to follow the logs",
        )
        server.kill(signal.SIGTERM)
        _out, err = follower.communicate(timeout=15)
    finally:
        server.kill()
    assert follower.returncode == 1
    assert err.strip().splitlines() == [
        f"Error: the orchestrator ended the log stream before job {job_id} ended (it may be "
        "restarting); run the command again to follow on"
    ]


def test_a_heartbeat_timeout_under_a_minute_is_one_warning_line_at_start(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", None)  # --heartbeat-timeout 3
    server.start()
    server.kill(signal.SIGTERM)
    warnings = [
        line
        for line in server.log_path.read_text().splitlines()
        if "released SimpleTuner agent heartbeats every 30 s" in line
    ]
    assert len(warnings) == 1
    assert " WARNING " in warnings[0]
