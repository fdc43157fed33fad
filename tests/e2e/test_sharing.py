"""Sharing a fleet (#18) with real `gpufleet worker`s, each with one GPU from a fake
`nvidia-smi`: a team that floods the queue does not hold another team's job past the next
dispatch (fair share), and a preemptible team's job gives its worker to a job of a team that
may preempt, writes a checkpoint, is requeued without spending a retry and resumes from that
checkpoint.

One orchestrator for the module (SQLite), the policy loop every 0.2 s; each test has workers
of its own label, so their queues do not meet.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    Member,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    job_state,
    serving,
    unique,
    wait_job,
)
from tests.waiting import wait_until

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,name*) echo "0, NVIDIA Fake GPU, 24576, GPU-0000fake, 550.90.07" ;;
  --query-gpu=index,utilization*) echo "0, 0, 0, 24576" ;;
  *) echo "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |" ;;
esac
"""
SHORT = [sys.executable, "-c", "import time; time.sleep(0.2)"]
# Twenty seconds of training for the first attempt, to be preempted however loaded the
# machine; the one that resumes (GPUFLEET_RESUME_FROM set) runs its last steps at once (#32).
STEPS = 1000
# Checkpoints only when the worker asks (--checkpoint-every 0): any checkpoint the job has is
# the one its preemption asked for.
TRAIN = [
    "sh",
    "-c",
    'delay=0.02; [ -n "$GPUFLEET_RESUME_FROM" ] && delay=0; exec "$0" -m gpufleet.examples.train'
    f' --backend numpy --steps {STEPS} --checkpoint-every 0 --step-delay "$delay"',
    sys.executable,
]
POLICY = {"fair_share": True, "preemption": True, "min_runtime_s": 0.5, "preempt_grace_s": 10}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("sharing"), None, **{"usage-interval": 0.2})


@pytest.fixture(scope="module")
def policy(server: ServerProcess) -> dict[str, Any]:
    with server.admin() as admin:
        resp = admin.patch("/api/queue/policy", json=POLICY)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


@pytest.fixture
def gpu_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a worker whose machine has one GPU (a fake `nvidia-smi` first on
    its PATH)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}


def offered_at(attempt: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(attempt["offered_at"])


def test_a_team_that_floods_the_queue_does_not_hold_another_teams_job_past_the_next_dispatch(
    server: ServerProcess,
    policy: dict[str, Any],
    agents: Callable[..., WorkerProcess],
    gpu_env: dict[str, str],
) -> None:
    assert policy["fair_share"] is True
    labels = {"pool": unique("share")}
    flooder = Member(server, "flood", "researcher")
    other = Member(server, "other", "researcher")

    # Forty: enough that ten still wait when the other team's job starts, however slowly a
    # loaded machine runs the test (at thirty, a CI run found eight left); the rest are
    # cancelled unrun. Queued before the workers start: none drains while the rest are sent
    # (a loaded machine took 20 s to send them, and the flood had drained).
    flood = [flooder.submit(labels, SHORT)["id"] for _ in range(40)]
    for _ in range(2):
        agents(server, labels=labels, env=gpu_env, persistent=True).start()
    wait_until(
        lambda: sum(job_state(server, j)["status"] == "completed" for j in flood[:6]) >= 2,
        timeout=15,
        message="the flood to be under way (two of its jobs completed)",
    )
    theirs = other.submit(labels, SHORT)
    done = wait_job(server, theirs["id"], "completed", "failed", timeout=30)
    assert done["status"] == "completed", done
    started = offered_at(done["attempt_history"][0])
    submitted = datetime.fromisoformat(theirs["created_at"])

    with server.admin() as admin:
        admin.post("/api/queue/cancel", json={"job_ids": flood})  # the rest of the flood
        states = [admin.get(f"/api/queue/{j}").json() for j in flood]
    offers = [[offered_at(a) for a in state["attempt_history"]] for state in states]
    # Another team's job jumped the queue: the next worker to free took it, before any
    # more of the flood...
    overtaken = [t for times in offers for t in times if submitted < t < started]
    assert overtaken == [], f"{len(overtaken)} flood jobs started between submit and start"
    # ... which was still waiting: without fair share it would have queued behind it.
    behind = [times for times in offers if not times or min(times) > started]
    assert len(behind) >= 10, "the flood had drained before the other team's job started"


def test_a_preempted_job_checkpoints_is_requeued_without_a_retry_and_resumes_after_the_other(
    server: ServerProcess,
    policy: dict[str, Any],
    agents: Callable[..., WorkerProcess],
    gpu_env: dict[str, str],
) -> None:
    assert policy["preemption"] is True
    labels = {"pool": unique("preempt")}
    worker = agents(server, labels=labels, env=gpu_env, persistent=True).start()
    low = Member(server, "low", "researcher", preemptible=True)
    high = Member(server, "high", "lead", can_preempt=True)

    unbuffered = {"env": {"PYTHONUNBUFFERED": "1"}}
    victim = low.submit(labels, TRAIN, max_retries=0, config=unbuffered)["id"]
    wait_until(
        lambda: (job_state(server, victim).get("progress") or {}).get("step", 0) >= 10,
        timeout=15,
        message="the low team's job to be training",
    )
    urgent = high.submit(labels, SHORT)["id"]

    done = wait_job(server, victim, "completed", "failed", "cancelled", timeout=60)
    assert done["status"] == "completed", done
    first, second = done["attempt_history"]
    assert first["status"] == "preempted", first
    # The worker took its job_cancel's preempt path (checkpoint, then stop), not a cancel's.
    assert first["error"].startswith("preempted by the queue policy for another job"), first
    with server.admin() as admin:
        audit = admin.get("/api/audit", params={"type": "job.preempted", "target": victim})
    [preempted] = audit.json()["events"]  # once, for the job that took its place
    assert preempted["detail"]["preempted_by"] == urgent
    assert preempted["detail"]["attempt_id"] == first["id"]
    assert first["worker_id"] == second["worker_id"] == worker.id
    assert done["max_retries"] == 0  # no retry to spend, and still it ran again

    theirs = job_state(server, urgent)
    assert theirs["status"] == "completed", theirs
    [ran] = theirs["attempt_history"]
    assert offered_at(first) < offered_at(ran) < offered_at(second)
    assert datetime.fromisoformat(ran["ended_at"]) <= offered_at(second)

    resumed = second["resumed_from"]
    assert resumed is not None and resumed["attempt_number"] == 1, second
    assert resumed["checkpoint"] == f"checkpoint-{resumed['step']}" and resumed["step"] > 0
    said = [line for line in job_log_lines(server, victim) if line.startswith("resumed from")]
    assert len(said) == 1, said
    assert resumed["checkpoint"] in said[0] and said[0].endswith(f" at step {resumed['step']}")
