"""Crashes: a worker killed mid-job, an orchestrator killed and restarted mid-job. Failover:
a worker given several orchestrator URLs moves on from one it cannot reach, job and all."""

from __future__ import annotations

import asyncio
import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.proxy import Proxy
from tests.e2e.conftest import (
    PYTHON,
    ServerProcess,
    WorkerProcess,
    free_port,
    job_log_lines,
    process_alive,
    serving,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until

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
    orchestrator = orchestrator_with(1)  # the killed worker is lost 1 s after it was heard
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    doomed = agents(orchestrator, labels=tag, persistent=True)
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", GATED, str(gate)])
    doomed.start()
    first = wait_job(orchestrator, job_id, "running")
    pid_file = doomed.work_dir / "jobs" / job_id / first["current_attempt_id"] / "pid"
    orphan = int(
        wait_until(
            lambda: pid_file.exists() and pid_file.read_text(),
            timeout=15,
            message="the orphan's pid file",
        )
    )

    doomed.signal(signal.SIGKILL)
    doomed.wait()
    wait_until(
        lambda: not process_alive(orphan),
        timeout=15,
        message="the dead worker's job to die with it",
    )
    gate.touch()
    rescuer = agents(orchestrator, labels=tag).start()

    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=30)
    assert job["status"] == "completed" and job["worker_id"] == rescuer.id
    assert [a["worker_id"] for a in job["attempt_history"]] == [doomed.id, rescuer.id]
    assert rescuer.wait() == 0


# The module's orchestrator (over HTTP), killed and started again: its heartbeat timeout
# (15 s) is long enough for the worker's reconnect backoff; this is about the restart, not
# health. Later tests find it started again, on the same port and data.
@pytest.mark.parametrize("orchestrator", ["http"], indirect=True)
def test_a_job_survives_an_orchestrator_crash_and_is_recorded_once(
    orchestrator: ServerProcess, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    # Tries to reach it again at least every second: back within a second of its restart.
    extra = ("--reconnect-max", "1")
    agent = agents(orchestrator, labels=tag, persistent=True, extra_args=extra)
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", GATED, str(gate)])
    agent.start()
    wait_until(
        lambda: "started" in job_log_lines(orchestrator, job_id),
        timeout=15,
        message="the job to start",
    )

    orchestrator.kill(signal.SIGKILL)
    gate.touch()  # the job ends while nobody listens
    wait_until(
        lambda: "completed (exit code 0)" in agent.log(), timeout=15, message="the job to end"
    )
    orchestrator.start()

    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=60)
    assert job["status"] == "completed"
    assert len(job["attempt_history"]) == 1 and job["worker_id"] == agent.id
    assert job_log_lines(orchestrator, job_id) == ["started", "finished"]
    assert agent.running()
    wait_until(
        lambda: agent.record()["status"] == "idle",
        timeout=15,
        message="the worker to be idle again",
    )


# -- several orchestrator URLs ----------------------------------------------------------------
# One real orchestrator stands for the replicas (two on one SQLite file are refused): the
# other URL is a dead port, or a relay to the same orchestrator that the test stops. Under
# TLS, the worker's one --ca-cert must serve every URL.


@pytest.fixture(scope="module", params=["http", "https"])
def orchestrator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    # A heartbeat timeout well above a switch's reconnect delay, even on a loaded machine: the
    # job must not be requeued while the worker moves over.
    flags: dict[str, Any] = {"heartbeat-timeout": 15}
    if request.param == "https":
        flags["ssl"] = True
    yield from serving(tmp_path_factory.mktemp("orchestrator"), None, **flags)


class Relay(Proxy):
    """The chaos relay, letting the connections it resets on `stop` end before its loop
    closes (else each is reported as "Task was destroyed but it is pending")."""

    async def _serve(self) -> None:
        await super()._serve()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 10)


@pytest.fixture
def relay(orchestrator: ServerProcess) -> Iterator[Proxy]:
    proxy = Relay(orchestrator.port).start()
    yield proxy
    proxy.stop()


def full_log(agent: WorkerProcess) -> str:
    return agent.log_path.read_text(errors="replace")


def url_of(server: ServerProcess, port: int) -> str:
    """A URL the worker may be given for `server`: its scheme, another port."""
    return f"{'https' if server.tls else 'http'}://127.0.0.1:{port}"


def test_a_worker_whose_first_url_is_dead_connects_through_the_next_and_runs_a_job(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    dead = url_of(orchestrator, free_port())
    tag = {"pool": unique("p")}
    agent = agents(orchestrator, labels=tag, orchestrator_url=f"{dead}, {orchestrator.url}")
    agent.start()

    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", "print('hello')"])
    job = wait_job(orchestrator, job_id, "completed", "failed")
    assert job["status"] == "completed" and job["worker_id"] == agent.id
    assert job_log_lines(orchestrator, job_id) == ["hello"]
    assert agent.wait() == 0
    log = full_log(agent)
    assert f"orchestrator {dead} unreachable; trying {orchestrator.url}" in log
    assert f"with {orchestrator.url}, offering" in log


def test_a_worker_whose_orchestrator_url_dies_mid_job_switches_and_runs_it_once(
    orchestrator: ServerProcess, relay: Proxy, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    relayed = url_of(orchestrator, relay.port)
    agent = agents(orchestrator, labels=tag, orchestrator_url=f"{relayed},{orchestrator.url}")
    job_id = submit_job(orchestrator, tag, [PYTHON, "-c", GATED, str(gate)])
    agent.start()
    wait_until(
        lambda: "started" in job_log_lines(orchestrator, job_id),
        timeout=15,
        message="the job to start",
    )
    assert f"with {relayed}, offering" in full_log(agent)  # connected through the relay

    relay.stop()  # that URL now refuses connections
    wait_until(
        lambda: f"orchestrator {relayed} unreachable; trying {orchestrator.url}" in full_log(agent),
        timeout=15,
        message="the worker to move on to the direct URL",
    )
    wait_until(
        lambda: "resumes job" in full_log(agent),
        timeout=15,
        message="the worker to register again with its running job",
    )
    gate.touch()  # the job ends only once the worker is back

    job = wait_job(orchestrator, job_id, "completed", "failed")
    assert job["status"] == "completed" and job["worker_id"] == agent.id
    assert len(job["attempt_history"]) == 1  # kept across the switch, not run again
    assert job_log_lines(orchestrator, job_id) == ["started", "finished"]
    assert agent.wait() == 0
