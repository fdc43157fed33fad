"""What a killed worker's job left running, beyond the reach of the death signal: a process
the job started in a session of its own (as `torchrun` starts its ranks). The job's main
process dies with its agent; the rest is killed when an agent starts on the work folder, and
only then: another agent sharing the folder leaves a live agent's job alone."""

from __future__ import annotations

import os
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    PYTHON,
    ServerProcess,
    WorkerProcess,
    job_state,
    process_alive,
    unique,
)
from tests.e2e.conftest import submit_job as submit
from tests.waiting import wait_until

Agents = Callable[..., WorkerProcess]

# Starts a child in a new session (its pid in argv[1]), then waits; its own pid in argv[2].
JOB = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(sys.argv[1] + ".tmp", "w").write(str(child.pid))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    open(sys.argv[2], "w").write(str(os.getpid()))
    time.sleep(300)
""")


@pytest.fixture(scope="module")
def database_url() -> None:
    """SQLite alone (overrides the e2e tier's both-backends one): what a job leaves running is
    the worker's business; the orchestrator's side of a lost worker runs on both databases in
    test_orchestrator.py and tests/api."""
    return None


def pid_in(path: Path) -> int | None:
    return int(path.read_text()) if path.exists() and path.read_text() else None


def test_a_restarted_worker_kills_what_its_killed_predecessors_job_left_running(
    server: ServerProcess, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("leftovers")}
    worker = agents(server, labels=tag, persistent=True).start()
    child_file, main_file = tmp_path / "child.pid", tmp_path / "main.pid"
    job_id = submit(server, tag, [PYTHON, "-c", JOB, str(child_file), str(main_file)])
    child = wait_until(lambda: pid_in(child_file), timeout=30, message="the job's child")
    main = wait_until(lambda: pid_in(main_file), timeout=30, message="the job's main process")
    try:
        # Another agent on the same work folder (they may share one) leaves a live job alone.
        neighbour = agents(server, labels={"pool": unique("elsewhere")}, persistent=True)
        neighbour.work_dir = worker.work_dir
        neighbour.start()
        assert process_alive(child) and process_alive(main)
        assert job_state(server, job_id)["status"] == "running"
        worker.signal(signal.SIGKILL)
        worker.wait()
        wait_until(lambda: not process_alive(main), timeout=5, message="the main process to die")
        assert process_alive(child), "the child should outlive its agent (its own session)"
        worker.proc = None
        worker.start()
        wait_until(lambda: not process_alive(child), timeout=10, message="the leftover killed")
        assert "left running" in worker.log()
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)
