"""Crashes: a worker killed mid-job, an orchestrator killed and restarted mid-job."""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    PYTHON,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    process_alive,
    submit_job,
    unique,
    wait_for,
    wait_job,
)

Agents = Callable[..., WorkerProcess]

# Writes its pid to the job folder, prints, then waits for the file named by argv[1].
GATED = textwrap.dedent("""
    import os, pathlib, sys, time
    pathlib.Path("pid").write_text(str(os.getpid()))
    print("started", flush=True)
    gate = pathlib.Path(sys.argv[1])
    while not gate.exists():
        time.sleep(0.05)
    print("finished", flush=True)
""")


@pytest.fixture
def orchestrator_with(tmp_path: Path) -> Iterator[Callable[[float], ServerProcess]]:
    """Starts an orchestrator of its own for the test, with the given heartbeat timeout."""
    started: list[ServerProcess] = []

    def start(heartbeat_timeout: float) -> ServerProcess:
        server = ServerProcess(
            tmp_path / "orchestrator",
            None,
            **{"heartbeat-interval": 0.5, "heartbeat-timeout": heartbeat_timeout},
        )
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill(signal.SIGTERM)


def test_a_job_of_a_killed_worker_is_requeued_and_completed_by_another(
    orchestrator_with: Callable[[float], ServerProcess], agents: Agents, tmp_path: Path
) -> None:
    orchestrator = orchestrator_with(2)
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    doomed = agents(orchestrator, labels=tag, persistent=True)
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", GATED, str(gate)])
    doomed.start()
    first = wait_job(orchestrator, job_id, "running")
    pid_file = doomed.work_dir / "jobs" / job_id / first["current_attempt_id"] / "pid"
    orphan = int(wait_for(lambda: pid_file.exists() and pid_file.read_text()))

    doomed.signal(signal.SIGKILL)
    doomed.wait()
    wait_for(lambda: not process_alive(orphan), what="the dead worker's job to die with it")
    gate.touch()
    rescuer = agents(orchestrator, labels=tag).start()

    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=30)
    assert job["status"] == "completed" and job["worker_id"] == rescuer.id
    assert [a["worker_id"] for a in job["attempt_history"]] == [doomed.id, rescuer.id]
    assert rescuer.wait() == 0


def test_a_job_survives_an_orchestrator_crash_and_is_recorded_once(
    orchestrator_with: Callable[[float], ServerProcess], agents: Agents, tmp_path: Path
) -> None:
    # Long enough for the worker's reconnect backoff: this is about the restart, not health.
    orchestrator = orchestrator_with(30)
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    agent = agents(orchestrator, labels=tag, persistent=True)
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", GATED, str(gate)])
    agent.start()
    wait_for(lambda: "started" in job_log_lines(orchestrator, job_id), what="the job to start")

    orchestrator.kill(signal.SIGKILL)
    gate.touch()  # the job ends while nobody listens
    wait_for(lambda: "completed (exit code 0)" in agent.log(), what="the job to end")
    orchestrator.start()

    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=60)
    assert job["status"] == "completed"
    assert len(job["attempt_history"]) == 1 and job["worker_id"] == agent.id
    assert job_log_lines(orchestrator, job_id) == ["started", "finished"]
    assert agent.running()
    wait_for(lambda: agent.record()["status"] == "idle", what="the worker to be idle again")
