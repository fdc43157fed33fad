"""The invariants checked after every chaos scenario, and the figures each run leaves behind.

Each check reads what the orchestrator says (`GET /api/queue`, `GET /api/queue/{id}`, the
audit log) and what really ran (the results file every job writes to, see `conftest.JOB`;
each node of a multi-node job notes its own lines, its rank last: `test_gang_faults.py`).
A violation is one sentence naming the job and what is wrong; the figures go to
`test-output/chaos/<scenario>.json` and one line of the test's output.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from tests.chaos.conftest import FENCING_WINDOW, OUTPUT, SEED, TERMINAL, Fleet
from tests.e2e.conftest import process_alive

ACTIVE_ATTEMPT = ("offered", "acknowledged", "running")
ENDED_ELSEWHERE = ("lost", "withdrawn", "cancelled")  # the orchestrator took it back
AUDITED = (
    "job.status_changed",
    "job.report_refused",
    "worker.registered",
    "worker.lost",
    "job.gang_dispatched",
)


@dataclass
class Run:
    """One process the results file saw: an attempt (one node of it) really started on some
    worker."""

    job_id: str
    attempt_id: str
    pid: int
    started: float
    node: int = 0  # a multi-node attempt's node rank
    ended: float | None = None  # its last `end` or `stop` line
    starts: int = 0
    ends: int = 0  # `end` lines: the job's own work finished


@dataclass
class Report:
    scenario: str
    date: str
    seed: int
    seconds: float = 0.0
    jobs: int = 0
    acknowledged: int = 0
    stored_unacknowledged: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    attempt_outcomes: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    overlapping_runs: int = 0  # within the fencing window, allowed
    longest_fencing_lag_s: float = 0.0
    refused_reports: int = 0
    abandoned_on_register: int = 0
    workers_lost_with_a_job: int = 0  # went silent past the heartbeat timeout mid-job
    faults: dict[str, int] = field(default_factory=dict)
    faults_injected: int = 0
    failed_without_running: int = 0  # offers withdrawn until the retries ran out
    extra: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        done = ", ".join(f"{n} {s}" for s, n in sorted(self.outcomes.items()))
        return (
            f"chaos {self.scenario}: {self.jobs} jobs ({done}), {self.attempts} attempts, "
            f"{self.runs} runs, faults injected {self.faults_injected} {self.faults}, "
            f"violations {len(self.violations)}"
        )

    def save(self) -> None:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        (OUTPUT / f"{self.scenario}.json").write_text(json.dumps(asdict(self), indent=2) + "\n")


def epoch(stamp: str | None) -> float | None:
    if stamp is None:
        return None
    moment = datetime.fromisoformat(stamp)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def check(fleet: Fleet, acked: list[str], killed: dict[str, list[float]]) -> Report:
    """Every invariant over every job of the fleet's orchestrator; `killed` maps a worker id
    to the times the test SIGKILLed its agent (the job's process dies with it, unannounced)."""
    report = Report(
        scenario=fleet.name,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        seed=SEED,
        seconds=round(time.time() - fleet.started, 1),
    )
    bad = report.violations.append
    jobs = fleet.all_jobs()
    with fleet.server.admin() as admin:
        details = {j["id"]: admin.get(f"/api/queue/{j['id']}").json() for j in jobs}
    audit = audit_events(fleet)
    runs = read_runs(fleet, bad)
    nodes = {  # a multi-node attempt → its nodes' workers, in rank order
        e["detail"]["attempt_id"]: list(e["detail"]["workers"])
        for e in audit
        if e["event_type"] == "job.gang_dispatched"
    }

    report.jobs = len(jobs)
    report.acknowledged = len(acked)
    report.stored_unacknowledged = len(set(details) - set(acked))
    report.outcomes = dict(Counter(j["status"] for j in jobs))
    report.attempts = sum(len(d["attempt_history"]) for d in details.values())
    report.attempt_outcomes = dict(
        Counter(a["status"] for d in details.values() for a in d["attempt_history"])
    )
    report.runs = len(runs)
    report.refused_reports = sum(1 for e in audit if e["event_type"] == "job.report_refused")
    report.abandoned_on_register = sum(
        1 for e in audit if e["event_type"] == "worker.registered" and e["detail"].get("abandoned")
    )
    report.workers_lost_with_a_job = sum(
        1 for e in audit if e["event_type"] == "worker.lost" and e["detail"].get("job_id")
    )
    report.failed_without_running = sum(
        1
        for job_id, d in details.items()
        if d["status"] == "failed" and not any(r.job_id == job_id for r in runs.values())
    )
    report.faults = fleet.faults.count()
    report.faults_injected = len(fleet.faults.faults)

    # Nothing acknowledged to a client before a fault is missing after it.
    for job_id in acked:
        if job_id not in details:
            bad(f"job {job_id} was acknowledged (201) but the orchestrator no longer has it")

    completions = Counter(
        e["target"]
        for e in audit
        if e["event_type"] == "job.status_changed" and e["detail"].get("new") == "completed"
    )
    for job_id, job in details.items():
        check_job(job, runs, completions[job_id], bad)
    report.overlapping_runs, report.longest_fencing_lag_s = check_overlaps(
        fleet, details, runs, killed, nodes, bad
    )
    for run in runs.values():
        if process_alive(run.pid):
            bad(f"job {run.job_id}: attempt {run.attempt_id}'s process (node {run.node}) runs on")
    for worker in fleet.workers:
        if not worker.running():
            bad(f"worker {worker.name} ({worker.id}) exited; its log ends:\n{worker.log()[-1500:]}")
    return report


def check_job(job: dict[str, Any], runs: dict[str, Run], completions: int, bad: Any) -> None:
    jid, status, history = job["id"], job["status"], job["attempt_history"]
    # Every submitted job ends in exactly one terminal state.
    if status not in TERMINAL:
        bad(f"job {jid} is still {status} (attempts: {[a['status'] for a in history]})")
        return
    live = [a["id"] for a in history if a["status"] in ACTIVE_ATTEMPT]
    if live:
        bad(f"job {jid} is {status} but attempts {live} are still active")
    won = [a for a in history if a["status"] == "completed"]
    if status == "completed" and [a["id"] for a in won] != [job["current_attempt_id"]]:
        bad(f"job {jid} completed with completed attempts {[a['id'] for a in won]}")
    if status != "completed" and won:
        bad(f"job {jid} is {status} although attempt {won[0]['id']} completed")
    # An offer withdrawn before the worker acknowledged it never ran and spends no retry; nor
    # does an attempt its worker's machine preempted (#17).
    ran = [a for a in history if a["status"] not in ("withdrawn", "preempted")]
    unacknowledged = sum(1 for a in history if a["status"] == "withdrawn")
    if status == "failed" and len(ran) < job["max_retries"] + 1 and unacknowledged <= 5:
        last = history[-1] if history else {}
        if last.get("status") != "failed":
            bad(f"job {jid} failed with retries left and no failed attempt: {history}")
    # Attempts that ran never exceed max_retries + 1; withdrawn offers are bounded too.
    if len(ran) > job["max_retries"] + 1 or unacknowledged > 6 or len(history) != job["attempts"]:
        bad(
            f"job {jid} has {len(ran)} attempts that ran and {unacknowledged} withdrawn "
            f"(counted {job['attempts']}) with max_retries {job['max_retries']}"
        )
    if sorted(a["number"] for a in history) != list(range(1, len(history) + 1)):
        bad(f"job {jid} has attempt numbers {[a['number'] for a in history]}")
    # The orchestrator never holds two live attempts of one job.
    ordered = sorted(history, key=lambda a: a["number"])
    for before, after in pairwise(ordered):
        ended, offered = epoch(before["ended_at"]), epoch(after["offered_at"])
        if ended is None or offered is None or ended > offered + 1e-3:
            bad(
                f"job {jid}: attempt {after['id']} was offered at {after['offered_at']} while "
                f"attempt {before['id']} was live (ended {before['ended_at']})"
            )
    # A completed job's result is recorded once: one `completed` status change, one finished run.
    if status == "completed":
        if completions != 1:
            bad(f"job {jid} was recorded completed {completions} times in the audit log")
        run = runs.get(job["current_attempt_id"])
        if run is None or run.ends != 1:
            bad(
                f"job {jid} completed by attempt {job['current_attempt_id']}, whose process "
                f"finished {0 if run is None else run.ends} times"
            )
    # Every process that ran was an attempt the orchestrator made for this job.
    known = {a["id"] for a in history}
    for run in runs.values():
        if run.job_id == jid and run.attempt_id not in known:
            bad(f"job {jid}: a process ran for attempt {run.attempt_id}, unknown to the job")


def check_overlaps(
    fleet: Fleet,
    details: dict[str, dict[str, Any]],
    runs: dict[str, Run],
    killed: dict[str, list[float]],
    nodes: dict[str, list[str]],
    bad: Any,
) -> tuple[int, float]:
    """No two runs of one job overlap past the fencing window; (overlaps allowed, longest lag).

    The fencing window of an attempt the orchestrator ended (lost, withdrawn, cancelled) runs
    from when it ended the attempt to FENCING_WINDOW seconds after its worker could hear the
    orchestrator again: the later of that end and the repair of any fault that cut the
    worker off from it. A run that overlaps a later run of its job must have stopped by then.
    """
    now = time.time()
    attempts = {a["id"]: a for d in details.values() for a in d["attempt_history"]}
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs.values():
        by_job[run.job_id].append(run)
    allowed, lag = 0, 0.0
    for job_id, job_runs in by_job.items():
        job_runs.sort(key=lambda r: r.started)
        for i, early in enumerate(job_runs):
            attempt = attempts.get(early.attempt_id)
            if attempt is None:
                continue  # reported by check_job
            worker_id = worker_of(early, attempt, nodes)
            stopped = run_end(early, worker_id, killed, bad)
            for late in job_runs[i + 1 :]:
                if late.attempt_id == early.attempt_id:
                    continue  # another node of the same attempt
                if stopped is None or stopped <= late.started:
                    continue
                ended = epoch(attempt["ended_at"])
                if attempt["status"] not in ENDED_ELSEWHERE or ended is None:
                    bad(
                        f"job {job_id}: attempts {early.attempt_id} ({attempt['status']}) and "
                        f"{late.attempt_id} ran at once"
                    )
                    continue
                heard = max(
                    [ended]
                    + [
                        f.ended
                        for f in fleet.faults.faults
                        if f.cuts_off(worker_id) and f.started <= ended + FENCING_WINDOW
                    ]
                )
                end = stopped if stopped != float("inf") else now
                if end > heard + FENCING_WINDOW:
                    bad(
                        f"job {job_id}: attempt {early.attempt_id} ran on {end - heard:.1f} s "
                        f"after its worker could hear it was over, beside attempt "
                        f"{late.attempt_id} (window {FENCING_WINDOW:g} s)"
                    )
                else:
                    allowed += 1
                    lag = max(lag, end - heard)
    return allowed, round(lag, 2)


def worker_of(run: Run, attempt: dict[str, Any], nodes: dict[str, list[str]]) -> str:
    """The worker the run's node ran on (node 0's is the attempt's)."""
    if run.node == 0:
        return str(attempt["worker_id"])
    return nodes[run.attempt_id][run.node]


def run_end(run: Run, worker_id: str, killed: dict[str, list[float]], bad: Any) -> float | None:
    """When the run's process stopped: its last line, or the SIGKILL of its worker."""
    if run.ended is not None:
        return run.ended
    kills = [t for t in killed.get(worker_id, []) if t >= run.started]
    if kills:
        return min(kills)
    if process_alive(run.pid):
        return float("inf")
    bad(
        f"job {run.job_id}: the process of attempt {run.attempt_id} died without a word, "
        "and its worker was not killed"
    )
    return None


def read_runs(fleet: Fleet, bad: Any) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for line in fleet.result_lines():
        kind, job_id, attempt_id, pid, stamp, *rank = line.split()
        at, node = float(stamp), int(rank[0]) if rank else 0
        key = attempt_id if node == 0 else f"{attempt_id}/{node}"  # node 0's: the attempt's
        run = runs.get(key)
        if run is None:
            run = runs[key] = Run(job_id, attempt_id, int(pid), at, node)
        if kind == "start":
            run.starts += 1
            if run.starts > 1:
                bad(f"job {job_id}: attempt {attempt_id} (node {node}) was started twice")
        else:
            run.ended = max(run.ended or at, at)
            run.ends += kind == "end"
    return runs


def audit_events(fleet: Fleet) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with fleet.server.admin() as admin:
        for kind in AUDITED:
            offset = 0
            while True:
                page = admin.get(
                    "/api/audit", params={"type": kind, "limit": 500, "offset": offset}
                ).json()
                events += page["events"]
                offset += len(page["events"])
                if offset >= page["total"] or not page["events"]:
                    break
    return events


def conclude(
    fleet: Fleet,
    acked: list[str],
    killed: dict[str, list[float]] | None = None,
    **extra: Any,
) -> Report:
    """Check, print the one-line summary, save the figures; fail on any violation."""
    report = check(fleet, acked, killed or {})
    report.extra = extra
    report.save()
    print(report.line())
    assert not report.violations, "\n".join(report.violations[:30])
    return report
