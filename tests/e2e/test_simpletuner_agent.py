"""The released SimpleTuner worker agent (`simpletuner==4.10.1`, its `worker_agent.py` exactly
as published) against a real `gpufleet server` on SQLite.

What these tests add to tests/api is the agent's own process (its pace, its reconnects, its
trainer): nothing in it depends on the storage backend. The orchestrator's side of each
exchange (the SimpleTuner dialect, cancels, drains, retries, stored uploads) runs on both
backends in tests/api (test_simpletuner_dialect.py, test_failures.py,
test_simpletuner_storage.py), and a restart's reading of what the database kept in
tests/api/test_restart.py.

`make test` fetches the wheel once (`make agent-wheel`); these tests take the module out of
it byte for byte (checked against the wheel's RECORD) and run it as `python -m
simpletuner.worker_agent` runs it, PyTorch hidden from it (`AS_MODULE_WITHOUT_TORCH` says why).
The trainer it launches, `python -m simpletuner.train`, is our stand-in
(tests/e2e/simpletuner_stub): the only part that is not SimpleTuner's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import (
    SIMPLETUNER_STUB,
    Member,
    ServerProcess,
    WorkerProcess,
    job_state,
    serving,
    unique,
    wait_job,
)
from tests.waiting import wait_until

AGENT_VERSION = "4.10.1"
AGENT_WHEEL = Path(sys.prefix) / "agent-wheels" / f"simpletuner-{AGENT_VERSION}-py3-none-any.whl"
AGENT_MODULE = "simpletuner/worker_agent.py"

# The agent beats every 30 s whatever it is told: the server must allow for that.
AGENT_SERVER_FLAGS = {"heartbeat-timeout": 90, "heartbeat-interval": 30}


@pytest.fixture(scope="session")
def released_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `simpletuner/worker_agent.py` from the released wheel, unchanged."""
    if not AGENT_WHEEL.is_file():
        pytest.fail(f"{AGENT_WHEEL} is missing; `make test` (or `make agent-wheel`) fetches it")
    root = tmp_path_factory.mktemp("released-agent")
    with zipfile.ZipFile(AGENT_WHEEL) as wheel:
        source = wheel.read(AGENT_MODULE)
        record = wheel.read(f"simpletuner-{AGENT_VERSION}.dist-info/RECORD").decode()
    listed = next(line for line in record.splitlines() if line.startswith(AGENT_MODULE + ","))
    digest = base64.urlsafe_b64encode(hashlib.sha256(source).digest()).rstrip(b"=").decode()
    assert listed.split(",")[1] == f"sha256={digest}", "worker_agent.py differs from its RECORD"
    (root / "simpletuner").mkdir()
    (root / "simpletuner" / "worker_agent.py").write_bytes(source)
    return root


# `python -m simpletuner.worker_agent`, with PyTorch unimportable in the agent's process alone
# (its trainer imports what it likes). The agent imports torch at every start to ask it for a
# CUDA or Apple device, seconds of CPU each (#32); PyTorch here has neither, so the agent goes
# on to its nvidia-smi fallback either way: what it takes when torch is missing, with the same
# answer. Its pace is its own (the 10 s before it registers again after an error included).
AS_MODULE_WITHOUT_TORCH = (
    "import runpy, sys; sys.modules['torch'] = None; "
    "runpy.run_module('simpletuner.worker_agent', run_name='__main__', alter_sys=True)"
)


class ReleasedAgent(WorkerProcess):
    """`python -m simpletuner.worker_agent`, with its own worker token and a label of its
    own (`lane`), so that each test's jobs go to its own agents."""

    def __init__(
        self, server: ServerProcess, code: Path, work_root: Path, *, persistent: bool
    ) -> None:
        # The agent's folder and the stand-in trainer's: one namespace package, two folders.
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{SIMPLETUNER_STUB}"}
        lane = {"lane": unique("lane")}
        super().__init__(server, work_root, persistent=persistent, labels=lane, env=env)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-c", AS_MODULE_WITHOUT_TORCH]
        cmd += ["--orchestrator-url", self.orchestrator_url, "--worker-token", self.token]
        cmd += ["--name", self.name]
        return [*cmd, "--persistent"] if self.persistent else cmd


@pytest.fixture(scope="module")
def database_url() -> None:
    """SQLite (the module docstring says why): overrides the e2e tier's both-backends one."""
    return None


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str | None
) -> Iterator[ServerProcess]:
    flags = {**AGENT_SERVER_FLAGS, "usage-interval": 0.5}  # for `policy_server`
    yield from serving(tmp_path_factory.mktemp("orchestrator"), database_url, **flags)


@pytest.fixture
def st_agents(released_agent: Path, tmp_path: Path) -> Iterator[Callable[..., ReleasedAgent]]:
    made: list[ReleasedAgent] = []

    def make(server: ServerProcess, *, persistent: bool = True) -> ReleasedAgent:
        made.append(ReleasedAgent(server, released_agent, tmp_path, persistent=persistent))
        return made[-1]

    yield make
    for agent in made:
        agent.stop()
    for folder in Path("/tmp").glob("simpletuner_job_j_*"):  # where the agent writes configs:
        job_id = folder.name.removeprefix("simpletuner_job_")  # ours alone (another test
        if any(ours(agent.server, job_id) for agent in made):  # process's may be starting)
            shutil.rmtree(folder, ignore_errors=True)


def ours(server: ServerProcess, job_id: str) -> bool:
    with server.admin() as admin:
        return admin.get(f"/api/queue/{job_id}").status_code == 200


def submit(
    server: ServerProcess, config: dict[str, Any], labels: dict[str, str], **body: Any
) -> str:
    payload = {"config": config, "target": "worker", "worker_labels": labels, **body}
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=payload)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def lane(agent: ReleasedAgent) -> dict[str, str]:
    """The label only this agent has."""
    return agent.labels


def admin_post(server: ServerProcess, path: str) -> httpx.Response:
    with server.admin() as admin:
        resp = admin.post(path)
    assert resp.status_code == 200, resp.text
    return resp


LONG = {"stub_steps": 600, "stub_sleep": 0.05}  # 30 s: ends only when told to


def test_a_failing_job_fails_with_the_agents_error_and_is_not_retried(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server).start()
    job_id = submit(server, {"stub_exit_code": 3}, lane(agent))
    job = wait_job(server, job_id, "completed", "failed", timeout=30)
    assert job["status"] == "failed", (job, agent.log())
    assert "Training exited with code 3" in job["error"]
    assert job["attempts"] == 1  # a process that failed is not retried unless asked


def test_a_cancelled_job_is_cancelled_and_its_stale_cancel_never_stops_the_next_job(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    """X runs, Y waits for the same agent; X is cancelled, and the agent takes Y, which the
    cancel must not stop (the agent stops whatever runs on any `job_cancel`, and reports the
    killed X's exit as its current job's)."""
    agent = st_agents(server).start()
    x = submit(server, LONG, lane(agent))
    wait_job(server, x, "running", timeout=20)
    y = submit(server, {"stub_steps": 20, "stub_sleep": 0.05}, lane(agent))
    admin_post(server, f"/api/queue/{x}/cancel")
    job = wait_job(server, y, "completed", "failed", "cancelled", timeout=30)
    assert job["status"] == "completed", (job, agent.log())
    assert [a["status"] for a in job["attempt_history"]] == ["completed"]
    assert job_state(server, x)["status"] == "cancelled"
    wait_until(
        lambda: agent.record()["status"] == "idle", timeout=15, message="the agent to be idle again"
    )


def test_a_persistent_agent_runs_jobs_back_to_back(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server).start()
    first = submit(server, {"stub_steps": 5}, lane(agent))
    second = submit(server, {"stub_steps": 5}, lane(agent))
    for job_id in (first, second):
        job = wait_job(server, job_id, "completed", "failed", timeout=30)
        assert job["status"] == "completed", (job, agent.log())
    assert agent.running()
    assert agent.record()["jobs_run"] == 2


def test_an_ephemeral_agent_exits_after_one_job_and_disconnects(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server, persistent=False).start()
    job_id = submit(server, {"stub_steps": 2}, lane(agent))
    assert wait_job(server, job_id, "completed", "failed")["status"] == "completed"
    assert agent.wait(timeout=15) == 0
    assert agent.record()["status"] == "offline"
    assert "Failed to notify disconnect" not in agent.log()


def test_drain_lets_the_running_job_finish_and_offers_nothing_more(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server).start()
    running = submit(server, {"stub_steps": 40, "stub_sleep": 0.05}, lane(agent))
    wait_job(server, running, "running", timeout=20)
    admin_post(server, f"/api/admin/workers/{agent.id}/drain")
    assert wait_job(server, running, "completed", "failed")["status"] == "completed"
    waiting = submit(server, {"stub_steps": 1}, lane(agent))
    wait_until(
        lambda: agent.record()["status"] == "draining",
        timeout=15,
        message="the agent to stay draining",
    )
    assert job_state(server, waiting)["status"] == "queued"
    assert agent.running()


def test_a_drained_idle_ephemeral_agent_shuts_down(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server, persistent=False).start()
    admin_post(server, f"/api/admin/workers/{agent.id}/drain")
    assert agent.wait(timeout=15) == 0


def test_a_rotated_token_makes_the_agent_exit(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    agent = st_agents(server).start()
    admin_post(server, f"/api/admin/workers/{agent.id}/token")
    assert agent.wait(timeout=15) == 0
    assert "Invalid worker token, exiting" in agent.log()


def test_a_job_with_a_command_waits_for_a_worker_that_runs_commands(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    """The released agent ignores `command` and `timeout_s` and runs `simpletuner.train`:
    such a job is never offered to it, and the job says why it waits."""
    agent = st_agents(server).start()
    command = submit(server, {"command": ["sh", "-c", "exit 7"]}, lane(agent))
    timed = submit(server, {"stub_steps": 1, "timeout_s": 60}, lane(agent))
    plain = submit(server, {"stub_steps": 1}, lane(agent))
    assert wait_job(server, plain, "completed", "failed")["status"] == "completed"
    for job_id in (command, timed):
        job = job_state(server, job_id)
        assert job["status"] == "queued", job
        mine = next(w for w in job["waiting"]["workers"] if w["worker_id"] == agent.id)
        assert any("SimpleTuner configs only" in r for r in mine["reasons"]), mine


def test_a_job_completes_and_its_trainer_had_a_live_upload_route_and_its_attempts_token(
    server: ServerProcess, st_agents: Callable[..., ReleasedAgent], tmp_path: Path
) -> None:
    """The agent hands the trainer `upload_endpoint` (the worker API's announce route, which
    now stores files) and the attempt's own upload token; once the job has ended, its
    attempt is no longer live there (409), as a stale report is refused."""
    agent = st_agents(server).start()
    record = tmp_path / "seen.json"
    job_id = submit(server, {"stub_steps": 3, "stub_record": str(record)}, lane(agent))
    job = wait_job(server, job_id, "completed", "failed", timeout=30)
    assert job["status"] == "completed", (job, agent.log())
    assert job["attempts"] == 1
    env = json.loads(record.read_text())["env"]
    assert env["SIMPLETUNER_UPLOAD_ENDPOINT"].startswith(server.url + "/api/")
    announce = {"path": "output/x", "size": 1, "sha256": "0" * 64}
    resp = httpx.post(
        env["SIMPLETUNER_UPLOAD_ENDPOINT"],
        json={"attempt_id": job["current_attempt_id"], **announce},
        headers={"X-Worker-Token": agent.token},
    )
    assert resp.status_code == 409, resp.text
    assert "live attempt" in resp.json()["detail"]
    assert env["SIMPLETUNER_UPLOAD_TOKEN"].startswith("ut_")
    wait_until(
        lambda: agent.record()["status"] == "idle", timeout=15, message="the agent to be idle again"
    )


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A second server (its own database) resending offers only every 20 s (ack timeout
    60 s): for a test that would wait on a resend, and for the one that kills it."""
    yield from serving(tmp_path_factory.mktemp("own"), **AGENT_SERVER_FLAGS, **{"ack-timeout": 60})


def test_a_retry_on_the_same_agent_starts_at_once(
    own_server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    """The retry is offered while the agent still reports the failure (it ignores offers
    until then): it must not wait for the offer's resend (20 s here)."""
    agent = st_agents(own_server).start()
    retry = {"max_retries": 1, "retry_on": ["failed"]}
    job_id = submit(own_server, {"stub_exit_code": 3}, lane(agent), **retry)
    job = wait_job(own_server, job_id, "failed", "completed", timeout=12)
    assert [a["status"] for a in job["attempt_history"]] == ["failed", "failed"], agent.log()


def test_the_agent_resumes_its_job_after_the_orchestrator_is_killed(
    own_server: ServerProcess, st_agents: Callable[..., ReleasedAgent], tmp_path: Path
) -> None:
    """On SQLite alone: what the restarted server tells the agent is read from the stored
    attempt, the same rows on either backend (tests/api/test_restart.py runs that on both)."""
    agent = st_agents(own_server).start()
    # The training outlasts the restart and the agent's 10 s wait: it ends only once the
    # agent has resumed it (or after 60 s, to fail rather than hang).
    done = tmp_path / "resumed"
    config = {"stub_steps": 1200, "stub_sleep": 0.05, "stub_until": str(done)}
    job_id = submit(own_server, config, lane(agent))
    wait_job(own_server, job_id, "running", timeout=20)
    own_server.kill(signal.SIGKILL)
    own_server.start()
    # The agent re-registers 10 s after its stream broke and is told to resume the job.
    # The whole log: `log()` is its tail, and the training's lines since may fill it.
    wait_until(
        lambda: "Resuming job: " + job_id in agent.log_path.read_text(errors="replace"),
        timeout=30,
        message=f"the agent to resume {job_id}",
    )
    done.touch()
    job = wait_job(own_server, job_id, "completed", "failed", timeout=30)
    assert job["status"] == "completed", (job, agent.log())
    assert [a["status"] for a in job["attempt_history"]] == ["completed"]


@pytest.fixture
def policy_server(server: ServerProcess) -> Iterator[ServerProcess]:
    """The module's server (its policy loop runs every 0.5 s) with fair share and preemption
    on for the test (a job may be preempted half a second after it started), then as before."""
    on = {"fair_share": True, "preemption": True, "min_runtime_s": 0.5, "preempt_grace_s": 10}
    with server.admin() as admin:
        before = admin.get("/api/queue/policy").json()
        assert admin.patch("/api/queue/policy", json=on).status_code == 200
    yield server
    with server.admin() as admin:
        assert admin.patch("/api/queue/policy", json={k: before[k] for k in on}).status_code == 200


def test_a_policy_preemption_cancels_the_agents_job_and_requeues_it_without_a_retry(
    policy_server: ServerProcess, st_agents: Callable[..., ReleasedAgent]
) -> None:
    """docs/scheduling.md: the released agent ignores the `job_cancel`'s `preempt` and
    `grace_s` and cancels; its attempt counts as preempted all the same, the job is requeued
    without spending a retry, and the freed agent is offered the job it was freed for first."""
    server = policy_server
    agent = st_agents(server).start()
    low = Member(server, "low", "researcher", preemptible=True)
    high = Member(server, "high", "lead", can_preempt=True)
    on_agent = {"gpu_count": 0}  # the agent has no GPU here
    victim = low.submit(lane(agent), None, config=LONG, max_retries=0, **on_agent)["id"]
    wait_job(server, victim, "running", timeout=20)
    urgent = high.submit(lane(agent), None, config={"stub_steps": 2}, **on_agent)["id"]

    theirs = wait_job(server, urgent, "completed", "failed", "cancelled", timeout=30)
    assert theirs["status"] == "completed", (theirs, agent.log())
    wait_until(
        lambda: len(job_state(server, victim)["attempt_history"]) == 2,
        timeout=15,
        message="the preempted job to be offered again",
    )
    job = job_state(server, victim)
    first, second = sorted(job["attempt_history"], key=lambda a: a["number"])
    assert first["status"] == "preempted", (first, agent.log())
    # A cancel's path, not a preempt's. The released agent races itself here: its stop
    # reports `cancelled` after terminating the trainer, while its monitor task reports the
    # SIGTERM'd trainer's exit as `failed`; whichever lands first ends the attempt, and
    # either counts as preempted (domain/outcomes.counted_as).
    assert first["error"] in ("cancelled on the worker", "Training exited with code -15"), first
    assert job["max_retries"] == 0 and job["status"] in ("offered", "running"), job
    with server.admin() as admin:
        audit = admin.get("/api/audit", params={"type": "job.preempted", "target": victim})
    [preempted] = audit.json()["events"]
    assert preempted["detail"]["preempted_by"] == urgent
    assert preempted["detail"]["attempt_id"] == first["id"]
    [ran] = theirs["attempt_history"]
    assert first["worker_id"] == ran["worker_id"] == second["worker_id"] == agent.id
    assert first["offered_at"] < ran["offered_at"] < second["offered_at"]
    admin_post(server, f"/api/queue/{victim}/cancel")  # its 30 s need not run again
    assert wait_job(server, victim, "cancelled")["status"] == "cancelled"
