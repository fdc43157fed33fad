"""Faults on a multi-node (gang) job (#35): a real orchestrator, three real workers on loopback
(each its own work folder) and one two-node job running the example's `--ddp` with
checkpoints. One node's worker is SIGKILLed, or frozen (SIGSTOP) past the heartbeat timeout,
or the orchestrator is SIGKILLed during the two-phase start. Each time: the other node stops
within 10 s of the orchestrator recording the loss (its `worker.lost` audit event), the job
resumes from the checkpoint every node completed and ends with the `weights_sha256` of an
uninterrupted run; no process of the job is left, and the chaos invariants hold.

Each node's process notes its start and end in the fleet's results file (`conftest.JOB`'s
lines, its node rank last): `GANG_JOB` runs the example in its own process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.chaos.conftest import (
    DATABASE_URL,
    FENCING_WINDOW,
    NOTES,
    RESTART_HEARTBEAT_TIMEOUT,
    Fleet,
)
from tests.chaos.invariants import conclude, epoch
from tests.e2e.conftest import WorkerProcess, process_alive
from tests.e2e.test_gang_resume import checkpoints, uninterrupted
from tests.torch_check import needs_torch
from tests.waiting import wait_until

needs_torch()

MODEL = ["--samples", "60", "--steps", "40", "--seed", "4", "--min-accuracy", "0.5"]
TRAIN = [*MODEL, "--ddp", "--checkpoint-every", "10", "--step-delay", "0.15"]
SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": SRC}
STOP_WITHIN = 10.0  # the other nodes stop this soon after the loss is recorded

# The example, run as this process (the worker's signals reach it), noting `start`, then
# `end`, or `stop` (SIGTERM, or a failure), as every chaos job does.
GANG_JOB = NOTES + textwrap.dedent("""
    import runpy
    note("start")
    sys.argv = ["train", *sys.argv[2:]]
    if os.environ.get("CHAOS_HOLD") and not os.environ.get("GPUFLEET_RESUME_FROM"):
        from gpufleet import progress
        announce = progress.checkpoint
        def held(*args, **kwargs):  # its first checkpoint announced, the node waits for the fault
            announce(*args, **kwargs)
            while True:
                time.sleep(1)
        progress.checkpoint = held
    try:
        runpy.run_module("gpufleet.examples.train", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    note("end" if code in (0, None) else "stop")
    sys.exit(code)
""")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The weights checksum of an uninterrupted run."""
    return uninterrupted(tmp_path_factory.mktemp("uninterrupted"), MODEL)


def submit(fleet: Fleet, struck_mid_run: bool = False) -> str:
    """The two-node job. `struck_mid_run`: its first attempt's nodes hold once they announced
    their first checkpoint (CHAOS_HOLD), until the fault strikes them, however slowly the
    machine runs the steps and uploads the checkpoint: at 0.15 s a step, a loaded machine
    once saw the gang complete before its loss was found. A resumed attempt runs on."""
    command = [sys.executable, "-c", GANG_JOB, str(fleet.results), *TRAIN]
    env = {**ENV, "CHAOS_HOLD": "1"} if struck_mid_run else ENV
    body = {
        "config": {"command": command, "nodes": 2, "env": env},
        "target": "worker",
        "worker_labels": fleet.labels,
        "max_retries": 2,
    }
    with fleet.server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def job(fleet: Fleet, job_id: str) -> dict[str, Any]:
    with fleet.server.admin() as admin:
        return dict(admin.get(f"/api/queue/{job_id}").json())


def audit(fleet: Fleet, kind: str, target: str | None = None) -> list[dict[str, Any]]:
    params = {"type": kind, "limit": 500, **({"target": target} if target else {})}
    with fleet.server.admin() as admin:
        return list(admin.get("/api/audit", params=params).json()["events"])


def nodes_of(fleet: Fleet, job_id: str, attempt_id: str) -> list[WorkerProcess]:
    """The attempt's nodes' workers, in rank order."""
    (dispatched,) = [
        e
        for e in audit(fleet, "job.gang_dispatched", job_id)
        if e["detail"]["attempt_id"] == attempt_id
    ]
    by_id = {w.id: w for w in fleet.workers}
    return [by_id[w] for w in dispatched["detail"]["workers"]]


def wait_for_a_complete_checkpoint(fleet: Fleet, job_id: str) -> dict[str, Any]:
    """Once every node completed a checkpoint: the job, running its first attempt."""

    def complete() -> bool:
        return any(c["nodes"]["complete"] for c in checkpoints(fleet.server, job_id))

    wait_until(complete, timeout=90, message="a checkpoint every node completed")
    running = job(fleet, job_id)
    assert running["status"] == "running" and running["attempts"] == 1, running
    return running


def lines(fleet: Fleet, attempt_id: str) -> dict[tuple[str, int], tuple[int, float]]:
    """(kind, node) → (pid, unix time) of the attempt's lines in the results file."""
    found = {}
    for line in fleet.result_lines():
        kind, _job, attempt, pid, at, node = line.split()
        if attempt == attempt_id:
            found[(kind, int(node))] = (int(pid), float(at))
    return found


def lost_at(fleet: Fleet, worker: WorkerProcess) -> float:
    """When the orchestrator recorded the worker lost (its audit event), once it has."""
    found = wait_until(
        lambda: audit(fleet, "worker.lost", worker.id),
        timeout=30,
        message=f"the orchestrator to find {worker.name} lost",
    )
    moment = epoch(found[-1]["ts"])
    assert moment is not None
    return moment


def stopped_within(fleet: Fleet, attempt_id: str, node: int, since: float) -> float:
    """Seconds from `since` to the node's process stopping (its `stop` line; then it exits)."""
    stopped = wait_until(
        lambda: lines(fleet, attempt_id).get(("stop", node)),
        timeout=30,
        message=f"node {node} of attempt {attempt_id} to stop",
    )
    pid, at = stopped
    wait_until(lambda: not process_alive(pid), timeout=10, message=f"pid {pid} to exit")
    return at - since


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every process on this machine started for the job (its environment names it)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("GPUFLEET_JOB_ID") == job_id:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def finish(
    fleet: Fleet,
    job_id: str,
    reference: str,
    killed: dict[str, list[float]] | None = None,
    **figures: float,
) -> dict[str, Any]:
    """The job completes with an uninterrupted run's weights, no process of it is left, and
    the chaos invariants hold (every node started, or none, in each attempt); `figures` go
    to the scenario's report, with its wall time."""
    wait_until(
        lambda: job(fleet, job_id)["status"] in ("completed", "failed", "cancelled"),
        timeout=120,
        message=f"job {job_id} to end",
    )
    done = job(fleet, job_id)
    assert done["status"] == "completed", (done["error"], done["attempt_history"])
    last = done["attempt_history"][-1]
    rank0 = next(w for w in fleet.workers if w.id == done["worker_id"])
    result = json.loads((rank0.work_dir / "jobs" / job_id / last["id"] / "result.json").read_text())
    assert (result["world_size"], result["weights_sha256"]) == (2, reference)
    # A node besides rank 0 may outlive the job's completion for its teardown (the
    # process group, its last writes: `rendezvous.OUTLIVE_GRACE`); then none is left.
    wait_until(
        lambda: not job_processes(job_id),
        timeout=20,
        message=f"every process of job {job_id} to exit",
    )
    for attempt in done["attempt_history"]:
        started = {node for (kind, node) in lines(fleet, attempt["id"]) if kind == "start"}
        assert started in (set(), {0, 1}), (attempt["id"], started)
    rounded = {"wall_s": round(time.time() - fleet.started, 1)}
    rounded.update((name, round(value, 2)) for name, value in figures.items())
    conclude(fleet, [job_id], killed, **rounded)
    print(f"{fleet.name}: {rounded}")
    return done


def resumed(done: dict[str, Any]) -> dict[str, Any]:
    """The last attempt resumed from a checkpoint of the first."""
    first, last = done["attempt_history"][0], done["attempt_history"][-1]
    assert first["status"] == "lost", done["attempt_history"]
    assert last["resumed_from"] is not None, done["attempt_history"]
    assert last["resumed_from"]["attempt_number"] == 1, done["attempt_history"]
    return last


def test_a_node_whose_worker_is_killed_ends_its_gang_which_resumes(
    fleet: Fleet, reference: str
) -> None:
    """Node 1's worker is SIGKILLed (the machine's agent dies; its job must die with it)."""
    fleet.start(workers=3)
    job_id = submit(fleet, struck_mid_run=True)
    first = wait_for_a_complete_checkpoint(fleet, job_id)["current_attempt_id"]
    _rank0, victim = nodes_of(fleet, job_id, first)
    killed: dict[str, list[float]] = defaultdict(list)
    orphan, _ = lines(fleet, first)[("start", 1)]
    killed[victim.id].append(time.time())
    fleet.faults.instant("node 1's worker SIGKILL mid-run", (victim.id,))
    victim.signal(signal.SIGKILL)
    victim.wait()
    # Its job dies with it (the death signal the worker asks Linux for), not orphaned.
    wait_until(lambda: not process_alive(orphan), timeout=5, message="node 1's job to die")
    orphan_s = time.time() - killed[victim.id][0]

    lost = lost_at(fleet, victim)
    stopped_s = stopped_within(fleet, first, 0, lost)
    assert stopped_s <= STOP_WITHIN
    fleet.restart_worker(victim)
    figures = {"killed_nodes_job_gone_s": orphan_s, "other_node_stopped_after_loss_s": stopped_s}
    resumed(finish(fleet, job_id, reference, killed, **figures))


def test_a_node_whose_worker_freezes_ends_its_gang_and_its_stale_copy_is_fenced(
    fleet: Fleet, reference: str
) -> None:
    """Rank 0's agent is frozen (SIGSTOP; its job, in a session of its own, runs on) past the
    heartbeat timeout; woken once the gang runs again elsewhere, it stops its stale copy."""
    fleet.start(workers=3)
    job_id = submit(fleet, struck_mid_run=True)
    first = wait_for_a_complete_checkpoint(fleet, job_id)["current_attempt_id"]
    frozen, _survivor = nodes_of(fleet, job_id, first)
    stale, _ = lines(fleet, first)[("start", 0)]
    with fleet.faults.window("rank 0's worker SIGSTOP past the heartbeat timeout", (frozen.id,)):
        frozen.signal(signal.SIGSTOP)
        lost = lost_at(fleet, frozen)
        stopped_s = stopped_within(fleet, first, 1, lost)
        assert stopped_s <= STOP_WITHIN
        wait_until(
            lambda: (j := job(fleet, job_id))["status"] == "running" and j["attempts"] == 2,
            timeout=60,
            message="the gang to run again without the frozen worker",
        )
        # Its copy runs on unless its collective broke when its peer was stopped (gloo may
        # end rank 0 then, on its own): only a copy still running has anything to fence.
        outlived = process_alive(stale)
        frozen.signal(signal.SIGCONT)
        woken = time.time()
    wait_until(
        lambda: not process_alive(stale), timeout=FENCING_WINDOW, message="the stale copy to stop"
    )
    figures = {"other_node_stopped_after_loss_s": stopped_s}
    if outlived:
        figures["stale_copy_stopped_s"] = time.time() - woken
    done = finish(fleet, job_id, reference, **figures)
    assert resumed(done)["worker_id"] != frozen.id
    refused = audit(fleet, "job.report_refused") + [
        e for e in audit(fleet, "worker.registered", frozen.id) if e["detail"].get("abandoned")
    ]
    assert refused, "the woken worker's late reports were neither refused nor abandoned"
    wait_until(lambda: frozen.record()["status"] == "idle", timeout=45, message="it to be back")


async def _node_states(url: str, attempt_id: str) -> dict[int, str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text("SELECT rank, state FROM attempt_nodes WHERE attempt_id = :a"),
                {"a": attempt_id},
            )
            return {int(rank): str(state) for rank, state in rows}
    finally:
        await engine.dispose()


def node_states(fleet: Fleet, attempt_id: str) -> dict[int, str]:
    """Where each node of the attempt stands in the two-phase start, as the database says
    (no answer of the API says it)."""
    db = fleet.server.data_dir / "gpufleet.db"
    return asyncio.run(_node_states(DATABASE_URL or f"sqlite+aiosqlite:///{db}", attempt_id))


def test_the_orchestrator_killed_during_the_two_phase_start_starts_no_node_alone(
    fleet: Fleet, reference: str
) -> None:
    """One node acknowledged, the other held (its agent frozen before the offer came): the
    orchestrator is SIGKILLed there and started again on the same database."""
    # The frozen agent stays online until the kill (seconds when loaded), a restart's health
    # grace outlasts the reconnect backoff (conftest), the held offer the hook's few reads.
    flags = {"heartbeat-timeout": 3 * RESTART_HEARTBEAT_TIMEOUT, "ack-timeout": 15}
    held, other = fleet.start(workers=2, **flags)
    held.signal(signal.SIGSTOP)
    job_id = submit(fleet)
    attempt = wait_until(
        lambda: job(fleet, job_id)["current_attempt_id"], timeout=30, message="the gang's offer"
    )
    ranks = {w.id: rank for rank, w in enumerate(nodes_of(fleet, job_id, attempt))}
    wait_until(
        lambda: node_states(fleet, attempt)[ranks[other.id]] == "acknowledged",
        timeout=30,
        message="the free node's acknowledgement",
    )
    assert node_states(fleet, attempt)[ranks[held.id]] == "offered"
    with fleet.faults.window("orchestrator SIGKILL during the two-phase start", None):
        fleet.server.kill(signal.SIGKILL)
        killed = time.time()
        held.signal(signal.SIGCONT)
        fleet.server.start()
    finish(fleet, job_id, reference)
    started = [at for (kind, _), (_, at) in lines(fleet, attempt).items() if kind == "start"]
    assert all(at > killed for at in started), "a node started before the other acknowledged"
    for worker in (held, other):
        wait_until(
            lambda w=worker: w.record()["status"] == "idle",
            timeout=30,
            message=f"{worker.name} idle again",
        )
