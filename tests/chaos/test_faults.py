"""Faults injected into a running fleet; after each, the invariants of `invariants.py`.

Each scenario starts its own orchestrator and persistent workers, submits its share of
GPUFLEET_CHAOS_JOBS short jobs at a steady pace, injects its faults while they run, waits for
every job to end and checks every invariant over every job. docs/faults.md lists the faults,
the invariants and the figures of the last run.
"""

from __future__ import annotations

import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable

from tests.chaos.conftest import (
    RESTART_HEARTBEAT_TIMEOUT,
    Fleet,
    Plan,
    Submitter,
    weighted_share,
)
from tests.chaos.invariants import Report, conclude
from tests.chaos.replicas import ReplicaSet
from tests.e2e.conftest import WorkerProcess
from tests.waiting import wait_until


def short(rng: random.Random) -> float:
    return rng.uniform(0.05, 0.5)


def long(rng: random.Random) -> float:
    return rng.uniform(1.5, 4.0)


def short_or_long(rng: random.Random) -> float:
    """Mostly short jobs, a quarter of them long enough to outlast a fault and its repair."""
    return long(rng) if rng.random() < 0.25 else short(rng)


def fed(fleet: Fleet, seconds: Callable[[random.Random], float]) -> Callable[[], Plan]:
    """What to submit for a fault to catch once the fleet is out of work (`wait_for_work`)."""
    return lambda: fleet.plans(1, seconds)[0]


# A job with less of its run left than this may end, and be reported, before the signal lands.
MARGIN = 1.5


def mid_run(
    fleet: Fleet, submitter: Submitter, at_least: float = 0.0
) -> list[tuple[WorkerProcess, str]]:
    """Busy workers whose job runs `MARGIN` s more at least, and was planned `at_least` s."""
    now = time.time()
    return [
        (w, j)
        for w, j, began in fleet.busy_since()
        if j in submitter.sent
        and submitter.sent[j].seconds >= at_least
        and began + submitter.sent[j].seconds - now >= MARGIN
    ]


def lost_on(fleet: Fleet, job_id: str, worker: WorkerProcess) -> None:
    """The fault hit the job mid-run: its attempt on `worker` ended `lost`."""
    with fleet.server.admin() as admin:
        history = admin.get(f"/api/queue/{job_id}").json()["attempt_history"]
    mine = [a for a in history if a["worker_id"] == worker.id]
    assert mine and mine[0]["status"] == "lost", (job_id, worker.name, history)


def wait_for_the_next_submit(submitter: Submitter) -> None:
    """Until one more submit is acknowledged (or the submitter is done)."""
    seen = len(submitter.acked)
    wait_until(
        lambda: len(submitter.acked) > seen or submitter.done.is_set(),
        timeout=30,
        message="a submit",
    )


def wait_offline(worker: WorkerProcess, timeout: float = 20) -> None:
    wait_until(
        lambda: worker.record()["status"] == "offline",
        timeout=timeout,
        message=f"the orchestrator to mark {worker.name} offline",
    )


def wait_back(worker: WorkerProcess, timeout: float = 45) -> None:
    """Reconnecting can take a while: the agent's backoff grows with the outage."""
    wait_until(
        lambda: worker.record()["status"] in ("idle", "busy"),
        timeout=timeout,
        message=f"{worker.name} to reconnect",
    )


def concluded_after_outages(fleet: Fleet, submitter: Submitter) -> Report:
    """The invariants once a scenario whose orchestrator was down at times has settled, the
    submits it never acknowledged counted beside the jobs."""
    fleet.settle()
    return conclude(
        fleet,
        submitter.acked,
        submits_unacknowledged=submitter.unacked_tries,
        jobs_fed=fleet.faults.fed,
    )


def test_workers_killed_with_sigkill_mid_job(fleet: Fleet) -> None:
    fleet.start(workers=3)
    submitter = fleet.submit(fleet.plans(weighted_share(20), short_or_long), pace=0.08)
    killed: dict[str, list[float]] = defaultdict(list)
    hit: list[tuple[str, WorkerProcess]] = []
    for i in range(2):
        time.sleep(fleet.rng.uniform(0.3, 1.0))
        busy = fleet.wait_for_work(
            lambda: mid_run(fleet, submitter), "a worker mid-job", feed=fed(fleet, long)
        )
        worker, job_id = fleet.rng.choice(busy)
        hit.append((job_id, worker))
        killed[worker.id].append(time.time())
        fleet.faults.instant("worker SIGKILL mid-job", (worker.id,))
        worker.signal(signal.SIGKILL)
        worker.wait()
        if i % 2:  # the orchestrator notices the silence first; else the agent is back first
            wait_offline(worker)
        fleet.restart_worker(worker)
    fleet.settle()
    conclude(fleet, submitter.acked, killed, jobs_fed=fleet.faults.fed)
    for job_id, worker in hit:  # each SIGKILL caught a job mid-run
        lost_on(fleet, job_id, worker)


def test_workers_frozen_past_the_heartbeat_timeout_are_fenced(fleet: Fleet) -> None:
    """SIGSTOP holds the agent, not its job (a session of its own): the job runs on, the
    orchestrator gives it to another worker, and the agent, woken, must stop its copy."""
    workers = fleet.start(workers=3)
    freezes = 2

    def long_run() -> Plan:  # outlasts the freeze: the heartbeat timeout and the sleep below
        return Plan(fleet.rng.uniform(4.0, 7.0), 3)

    plans = fleet.plans(weighted_share(15), short)
    for n in range(freezes):
        plans.insert((n + 1) * len(plans) // (freezes + 2), long_run())
    submitter = fleet.submit(plans, pace=0.08)
    frozen: list[tuple[WorkerProcess, str]] = []

    def running_long_job() -> list[tuple[WorkerProcess, str]]:
        """Workers mid-way through a long job. Not one whose job may end, and be reported,
        before the SIGSTOP lands: that worker would be frozen idle (a race that failed runs)."""
        return [(w, j) for w, j in mid_run(fleet, submitter, 4.0) if (w, j) not in frozen]

    while len(frozen) < freezes and all(w.running() for w in workers):  # else: say why below
        running = fleet.wait_for_work(running_long_job, "a long job running", feed=long_run)
        worker, job_id = running[0]
        with fleet.faults.window("worker SIGSTOP past the heartbeat timeout", (worker.id,)):
            worker.signal(signal.SIGSTOP)
            wait_offline(worker)
            time.sleep(fleet.rng.uniform(0.5, 1.5))  # the job moves on meanwhile
            worker.signal(signal.SIGCONT)
        frozen.append((worker, job_id))
    fleet.settle()
    report = conclude(fleet, submitter.acked, jobs_fed=fleet.faults.fed)
    assert len(frozen) == freezes, "a worker exited"
    for worker, job_id in frozen:
        wait_back(worker)
        lost_on(fleet, job_id, worker)
    assert report.refused_reports + report.abandoned_on_register >= 1
    assert len(workers) == sum(w.running() for w in workers)


def test_orchestrator_killed_during_dispatch_and_status_reports(fleet: Fleet) -> None:
    fleet.start(workers=3, **{"heartbeat-timeout": RESTART_HEARTBEAT_TIMEOUT})
    submitter = fleet.submit(fleet.plans(weighted_share(20), short), pace=0.05)

    def ends() -> int:
        return sum(line.startswith("end ") for line in fleet.result_lines())

    for moment in ("during dispatch", "during status reports"):
        time.sleep(fleet.rng.uniform(0.3, 1.0))
        if moment == "during dispatch":  # a submit was just acknowledged: its offer goes out
            dispatch_next(fleet, submitter)
        else:  # a job just finished: its report is in flight
            seen = ends()
            fleet.wait_for_work(
                lambda n=seen: [1] if ends() > n else [], "a job to end", feed=fed(fleet, short)
            )
        with fleet.faults.window(f"orchestrator SIGKILL {moment}", None):
            fleet.server.kill(signal.SIGKILL)
            time.sleep(fleet.rng.uniform(0.1, 1.0))
            fleet.server.start()
    report = concluded_after_outages(fleet, submitter)
    assert report.faults_injected == 2


def dispatch_next(fleet: Fleet, submitter: Submitter) -> None:
    """Until a submit was just acknowledged: the submitter's next, or one more job."""
    if submitter.done.is_set():
        fleet.feed(fleet.plans(1, short)[0])
    else:
        wait_for_the_next_submit(submitter)


CUTS = 5


def test_event_streams_cut_mid_stream(fleet: Fleet) -> None:
    workers = fleet.start(workers=3, via_proxy=3)
    assert fleet.proxy is not None
    submitter = fleet.submit(fleet.plans(weighted_share(15), short), pace=0.15)
    everyone = tuple(w.id for w in workers)
    cut_mid_run = 0
    while not submitter.done.is_set() or len(fleet.faults.faults) < CUTS:
        time.sleep(fleet.rng.uniform(0.3, 1.0))
        busy = fleet.wait_for_work(fleet.busy_workers, "a job running", feed=fed(fleet, short))
        if fleet.proxy.cut():
            fleet.faults.instant("every connection cut mid-stream", everyone)
            cut_mid_run += bool(busy)
    fleet.settle()
    conclude(
        fleet,
        submitter.acked,
        connections_reset=fleet.proxy.resets,
        cut_mid_run=cut_mid_run,
        jobs_fed=fleet.faults.fed,
    )


def test_orchestrator_unreachable_past_the_heartbeat_timeout(fleet: Fleet) -> None:
    workers = fleet.start(workers=3, via_proxy=2)
    assert fleet.proxy is not None
    cut_off = workers[:2]
    submitter = fleet.submit(fleet.plans(weighted_share(15), short_or_long), pace=0.1)
    for i in range(2):
        time.sleep(fleet.rng.uniform(0.3, 1.0))
        fleet.wait_for_work(
            lambda: [w for w, _ in mid_run(fleet, submitter) if w in cut_off],
            what="a job running behind the relay",
            feed=fed(fleet, long),
        )
        blackhole = i % 2 == 1
        kind = "orchestrator unreachable: " + ("black hole" if blackhole else "refused")
        with fleet.faults.window(kind, tuple(w.id for w in cut_off)):
            fleet.proxy.partition(blackhole=blackhole)
            for worker in cut_off:
                wait_offline(worker)
            time.sleep(1.0)  # deliberate: the partition outlasts the workers' going offline
            fleet.proxy.heal()
        for worker in cut_off:
            wait_back(worker)
    fleet.settle()
    report = conclude(fleet, submitter.acked, jobs_fed=fleet.faults.fed)
    assert report.workers_lost_with_a_job >= 1, "no partition caught a worker mid-job"


def test_replicas_killed_mid_dispatch_and_mid_run(replicated_fleet: Fleet) -> None:
    """Two replicas on PostgreSQL; workers know every replica's URL. A replica is killed
    (SIGKILL) right after a submit was acknowledged, or while jobs run, then started again;
    the other carries on: streams move, the sweeps move with the leadership."""
    fleet = replicated_fleet
    fleet.start(workers=3)
    replicas: ReplicaSet = fleet.server
    # Paced to keep jobs coming while the replica kills happen.
    submitter = fleet.submit(fleet.plans(weighted_share(15), short_or_long), pace=0.25)
    for moment in ("mid-dispatch", "mid-run"):
        time.sleep(fleet.rng.uniform(0.3, 1.0))
        victim = fleet.rng.choice(replicas.live())
        if moment == "mid-dispatch":  # a submit was just acknowledged: its offer goes out
            dispatch_next(fleet, submitter)
        else:
            fleet.wait_for_work(
                lambda: mid_run(fleet, submitter), "a job running", feed=fed(fleet, long)
            )
        with fleet.faults.window(f"replica SIGKILL {moment}", None):
            victim.kill(signal.SIGKILL)
            time.sleep(fleet.rng.uniform(0.5, 2.0))  # the others serve meanwhile
            victim.start()
    report = concluded_after_outages(fleet, submitter)
    assert report.faults_injected == 2
    assert len(fleet.workers) == sum(w.running() for w in fleet.workers)


POISON_WORKERS = 3  # the orchestrator's --poison-after-workers default


def submit_poison(fleet: Fleet) -> str:
    """A job no worker can start (its executable is missing anywhere), with retries to spare
    for failures and losses alike: only the poison-job rule can end it."""
    body = {
        "config": {"command": ["/nonexistent/gpufleet-poison-trainer", "--epochs", "3"]},
        "target": "worker",
        "worker_labels": fleet.labels,
        "max_retries": 20,
        "retry_on": ["lost", "failed"],
    }
    with fleet.server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def test_poison_jobs_that_no_worker_can_start(fleet: Fleet) -> None:
    """Poison jobs among ordinary ones: every worker they reach reports them failed and lives
    on; each ends failed after failing to start on 3 different workers, retries left or not;
    the other jobs run."""
    workers = fleet.start(workers=4)
    submitter = fleet.submit(fleet.plans(10, short), pace=0.08)
    poison: list[str] = []
    for _ in range(3):
        wait_for_the_next_submit(submitter)
        poison.append(submit_poison(fleet))
        fleet.faults.instant("poison job submitted", None)
    fleet.settle()
    report = conclude(fleet, [*submitter.acked, *poison])
    with fleet.server.admin() as admin:
        jobs = [admin.get(f"/api/queue/{job_id}").json() for job_id in poison]
    for job in jobs:
        history = job["attempt_history"]
        assert job["status"] == "failed", (job["id"], history)
        assert "/nonexistent/gpufleet-poison-trainer" in job["error"]
        assert all(a["status"] == "failed" and a["started_at"] is None for a in history)
        if job["error"].startswith(f"could not start on {POISON_WORKERS} different workers"):
            assert len({a["worker_id"] for a in history}) == POISON_WORKERS
            # The rule may end it on its very last retry too: both rules hold, the poison
            # reason is the one given (`outcomes.decide`).
            assert len(history) <= job["max_retries"] + 1
        else:  # no other worker was idle when it came back: it went on where it failed
            assert "no retries left" in job["error"], job["error"]
            assert len({a["worker_id"] for a in history}) < POISON_WORKERS, history
    assert report.outcomes.get("completed", 0) >= 1
    assert len(workers) == sum(w.running() for w in workers)
