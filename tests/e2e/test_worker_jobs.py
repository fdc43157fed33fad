"""Real `gpufleet worker` processes running real jobs for a real `gpufleet server`."""

from __future__ import annotations

import json
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
    job_state,
    process_alive,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until

Agents = Callable[..., WorkerProcess]
EXAMPLE_CONFIG = Path(__file__).parents[2] / "examples" / "train-config.json"


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("orchestrator"), None, **{"heartbeat-interval": 0.5}
    )
    server.start()
    yield server
    server.kill(signal.SIGTERM)


SHARED = {"pool": unique("one-worker")}


@pytest.fixture(scope="module")
def shared(
    orchestrator: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One persistent worker (labelled SHARED) for the module's tests about what happens to a
    job, not to its worker: a worker's start is a CPU-second (#32). Those tests leave it idle
    and undrained; the ones about how a worker ends start their own."""
    agent = WorkerProcess(
        orchestrator,
        tmp_path_factory.mktemp("one-worker"),
        labels=SHARED,
        persistent=True,
        cancel_grace=0.5,
    ).start()
    yield agent
    agent.stop()


def idle(agent: WorkerProcess) -> None:
    wait_until(
        lambda: agent.record()["status"] == "idle",
        timeout=15,
        message="the worker to be idle again",
    )


def script(code: str, *args: str) -> list[str]:
    return [PYTHON, "-c", textwrap.dedent(code), *args]


# Prints, reports progress, then waits until the file named by argv[1] exists.
GATED = """
    import pathlib, sys, time
    from gpufleet.progress import report
    print("halfway there", flush=True)
    print("a warning", file=sys.stderr, flush=True)
    report(step=5, total=10, loss=0.5)
    gate = pathlib.Path(sys.argv[1])
    while not gate.exists():
        time.sleep(0.05)
    report(step=10, total=10, loss=0.1)
    print("done", flush=True)
"""


def test_an_ephemeral_worker_trains_the_example_and_exits_after_one_job(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    tag = {"pool": unique("p")}
    config = json.loads(EXAMPLE_CONFIG.read_text())
    # The numpy model: PyTorch's import is seconds of CPU (the torch path: test_gang_resume.py).
    command = [*config["command"][:3], "--steps", "60", "--backend", "numpy"]
    agent = agents(orchestrator, labels=tag)
    job_id = submit_job(orchestrator, tag, command, config={"timeout_s": config["timeout_s"]})
    agent.start()

    assert agent.wait() == 0
    job = job_state(orchestrator, job_id)
    assert job["status"] == "completed" and job["exit_code"] == 0
    assert job["progress"]["step"] == job["progress"]["total"] == 60
    assert job["progress"]["metrics"]["accuracy"] >= 0.9
    result = agent.work_dir / "jobs" / job_id / job["current_attempt_id"] / "result.json"
    assert json.loads(result.read_text())["accuracy"] >= 0.9
    assert any(line.startswith("wrote ") for line in job_log_lines(orchestrator, job_id))
    assert agent.record()["status"] == "offline"


def test_a_persistent_worker_runs_job_after_job_and_stays(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    tag = {"pool": unique("p")}
    agent = agents(orchestrator, labels=tag, persistent=True).start()
    jobs = [submit_job(orchestrator, tag, script(f"print('job {n}')")) for n in range(3)]

    for n, job_id in enumerate(jobs):
        job = wait_job(orchestrator, job_id, "completed", "failed")
        assert job["status"] == "completed" and job["worker_id"] == agent.id
        assert job_log_lines(orchestrator, job_id) == [f"job {n}"]
    assert agent.running()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert agent.record()["status"] == "offline"


def test_logs_and_progress_are_visible_while_the_job_runs(
    orchestrator: ServerProcess, shared: WorkerProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job_id = submit_job(orchestrator, SHARED, script(GATED, str(gate)))

    wait_until(
        lambda: {"halfway there", "a warning"} <= set(job_log_lines(orchestrator, job_id)),
        timeout=15,
        message="the first lines to reach the orchestrator",
    )
    running = wait_until(
        lambda: (job := job_state(orchestrator, job_id))["progress"] and job,
        timeout=15,
        message="progress",
    )
    assert running["status"] == "running"
    assert running["progress"] == {"step": 5, "total": 10, "metrics": {"loss": 0.5}}
    gate.touch()
    done = wait_job(orchestrator, job_id, "completed")
    assert done["progress"]["step"] == 10
    assert job_log_lines(orchestrator, job_id).count("done") == 1


def test_cancelling_a_job_kills_its_process_group_even_when_it_ignores_sigterm(
    orchestrator: ServerProcess, shared: WorkerProcess, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    code = """
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
        print("both running", flush=True)
        time.sleep(120)
    """
    job_id = submit_job(orchestrator, SHARED, script(code, str(pids)))
    wait_until(
        lambda: "both running" in job_log_lines(orchestrator, job_id),
        timeout=15,
        message="job start",
    )

    with orchestrator.admin() as admin:
        assert admin.post(f"/api/queue/{job_id}/cancel").status_code == 200

    job = wait_job(orchestrator, job_id, "cancelled")
    assert job["attempt_history"][-1]["status"] == "cancelled"
    for pid in map(int, pids.read_text().split()):
        wait_until(lambda pid=pid: not process_alive(pid), timeout=10, message=f"pid {pid} to die")
    assert shared.running()  # a persistent worker carries on
    idle(shared)


def test_a_job_past_its_timeout_fails_saying_so(
    orchestrator: ServerProcess, shared: WorkerProcess
) -> None:
    code = "import time; print('sleeping', flush=True); time.sleep(120)"
    config = {"timeout_s": 1}
    job_id = submit_job(orchestrator, SHARED, script(code), config=config, max_retries=0)

    job = wait_job(orchestrator, job_id, "failed", "completed")
    assert job["status"] == "failed"
    assert "timed out after 1 s" in job["error"] and "sleeping" in job["error"]
    idle(shared)


def test_a_failing_job_is_retried_then_fails_with_its_exit_code_and_last_output(
    orchestrator: ServerProcess, shared: WorkerProcess
) -> None:
    code = """
        import sys
        print("loading data")
        print("CUDA out of memory", file=sys.stderr)
        sys.exit(3)
    """
    retry = {"max_retries": 1, "retry_on": ["lost", "failed"]}
    job_id = submit_job(orchestrator, SHARED, script(code), **retry)

    job = wait_job(orchestrator, job_id, "failed", "completed")
    assert job["status"] == "failed" and job["exit_code"] == 3, json.dumps(job)
    assert [a["status"] for a in job["attempt_history"]] == ["failed", "failed"]
    assert "exited with code 3" in job["error"] and "CUDA out of memory" in job["error"]


def test_a_drained_persistent_worker_finishes_its_job_takes_no_new_one_until_undrained(
    orchestrator: ServerProcess, shared: WorkerProcess, tmp_path: Path
) -> None:
    agent, tag = shared, SHARED
    gate = tmp_path / "gate"
    first = submit_job(orchestrator, tag, script(GATED, str(gate)))
    wait_job(orchestrator, first, "running")

    with orchestrator.admin() as admin:
        assert admin.post(f"/api/admin/workers/{agent.id}/drain").status_code == 200
        second = submit_job(orchestrator, tag, script("print('second')"))
        gate.touch()
        assert wait_job(orchestrator, first, "completed")["worker_id"] == agent.id
        wait_until(
            lambda: agent.record()["status"] == "draining", timeout=15, message="draining status"
        )
        assert job_state(orchestrator, second)["status"] == "queued"
        assert agent.running()

        assert admin.post(f"/api/admin/workers/{agent.id}/undrain").status_code == 200
    assert wait_job(orchestrator, second, "completed")["worker_id"] == agent.id


def test_an_idle_ephemeral_worker_exits_when_drained(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    agent = agents(orchestrator, labels={"pool": unique("p")}).start()

    with orchestrator.admin() as admin:
        assert admin.post(f"/api/admin/workers/{agent.id}/drain").status_code == 200

    assert agent.wait() == 0


def test_one_sigint_lets_the_job_finish_then_the_worker_exits(
    orchestrator: ServerProcess, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("p")}
    gate = tmp_path / "gate"
    agent = agents(orchestrator, labels=tag, persistent=True)
    job_id = submit_job(orchestrator, tag, script(GATED, str(gate)))
    agent.start()
    wait_job(orchestrator, job_id, "running")

    # SIGINT: an operator at a terminal. (SIGTERM preempts: test_worker_preempt.py.)
    agent.signal(signal.SIGINT)
    wait_until(
        lambda: "stopping" in agent.log(), timeout=15, message="the worker to take the signal"
    )
    assert agent.running()
    gate.touch()

    assert agent.wait() == 0
    assert job_state(orchestrator, job_id)["status"] == "completed"


def test_two_sigints_cancel_the_job_report_it_and_exit(
    orchestrator: ServerProcess, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("p")}
    agent = agents(orchestrator, labels=tag, persistent=True)
    job_id = submit_job(orchestrator, tag, script(GATED, str(tmp_path / "never")))
    agent.start()
    wait_job(orchestrator, job_id, "running")

    agent.signal(signal.SIGINT)
    wait_until(
        lambda: "stopping" in agent.log(), timeout=15, message="the worker to take the first signal"
    )
    agent.signal(signal.SIGINT)

    assert agent.wait() == 0
    attempt = job_state(orchestrator, job_id)["attempt_history"][0]
    assert attempt["status"] == "cancelled"
    assert "signal" in (attempt["error"] or "")


def test_sigterm_asks_a_job_that_handles_it_for_a_checkpoint_then_stops_it_and_exits(
    orchestrator: ServerProcess, agents: Agents
) -> None:
    # Worker side only: what the orchestrator makes of `preempted` and of the uploads is the
    # server's part of #17 (docs/artifacts.md); the worker exits 0 either way.
    tag = {"pool": unique("p")}
    command = [
        PYTHON,
        "-m",
        "gpufleet.examples.train",
        "--steps",
        "5000",
        "--step-delay",
        "0.005",
        "--backend",
        "numpy",
    ]
    agent = agents(orchestrator, labels=tag, persistent=True, extra_args=("--preempt-grace", "10"))
    job_id = submit_job(orchestrator, tag, command)
    agent.start()
    wait_until(
        lambda: (job_state(orchestrator, job_id)["progress"] or {}).get("step"),
        timeout=15,
        message="steps",
    )

    agent.signal(signal.SIGTERM)

    assert agent.wait() == 0
    log = agent.log_path.read_text()  # all of it: -v logs every request
    assert "preempted (SIGTERM)" in log
    assert "asking for a checkpoint (SIGUSR1)" in log
    (attempt,) = list((agent.work_dir / "jobs" / job_id).iterdir())
    folder = attempt / "output"
    (checkpoint,) = list(folder.glob("checkpoint-*"))  # written on the signal, not before
    assert sorted(p.name for p in checkpoint.iterdir()) == ["state.json", "weights.npz"]
    assert not (folder.parent / "result.json").exists()  # stopped, not finished


def test_a_chatty_trainers_progress_is_trimmed_by_the_worker_never_refused(
    orchestrator: ServerProcess, shared: WorkerProcess
) -> None:
    chatty = """
        from gpufleet.progress import report
        report(step=3, total=4, loss=0.25, samples="x" * 50_000, lr=0.001)
        print("reported", flush=True)
    """
    job_id = submit_job(orchestrator, SHARED, script(chatty))

    job = wait_job(orchestrator, job_id, "completed", "failed")
    assert job["status"] == "completed"
    assert job["progress"] == {
        "step": 3,
        "total": 4,
        "metrics": {"loss": 0.25, "lr": 0.001},
        "trimmed": True,
    }
    assert "over 16384 bytes of JSON" in shared.log_path.read_text()
