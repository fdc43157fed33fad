"""Preemption of checkpointing jobs (#17): spot machines going away, with notice (SIGTERM to
the worker: the job checkpoints on the signal, the worker reports `preempted`) and without
(SIGKILL: the worker and its job vanish, the orchestrator finds it lost).

Beside the tier's invariants (`invariants.py`), three of the issue's:
- no artifact of a completed job is lost: its final attempt's `result.json` is listed and
  downloads with the listed sha256;
- a resume uses a checkpoint an earlier attempt of the job committed before that attempt
  ended, never one of an attempt fenced out while another ran, and the newest such one;
- the work done twice (steps an attempt ran past the checkpoint its successor resumed from)
  totals at most one checkpoint interval per preemption with notice (the job checkpoints on
  the signal), and two per preemption without (the steps since its last checkpoint, and a
  checkpoint written but not yet committed when the machine vanished: under load the
  upload lags the writing by up to an interval).
"""

from __future__ import annotations

import hashlib
import signal
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.chaos.conftest import Fleet, weighted_share
from tests.chaos.invariants import conclude, epoch
from tests.e2e.conftest import PYTHON, WorkerProcess

EVERY = 5  # steps between checkpoints
STEP_S = 0.1
# A preemption is aimed at a job with this many steps left at least (1 s): a SIGTERM that
# reaches a job in its last steps lets it finish, completed, not preempted, and a run whose
# notices all landed so found no attempt preempted (it failed 2 of 8 full runs).
LEFT_STEPS = 10

# Counts steps from its checkpoint (GPUFLEET_RESUME_FROM) to argv[3]; a checkpoint every
# argv[4] steps and when the worker signals; start/stop/end lines in argv[1] as the tier's
# JOB writes them, and every step in argv[2].
JOB = textwrap.dedent("""
    import json, os, signal, sys, time
    from pathlib import Path
    from gpufleet import progress
    out, steps_out, steps, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ids = os.environ["GPUFLEET_JOB_ID"] + " " + os.environ["GPUFLEET_ATTEMPT_ID"]
    def append(path, text):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, text.encode())
        os.close(fd)
    def note(kind):
        append(out, f"{kind} {ids} {os.getpid()} {time.time():.6f}\\n")
    def stop(*_):
        note("stop")
        os._exit(143)
    signal.signal(signal.SIGTERM, stop)
    asked = []
    progress.on_checkpoint_signal(lambda: asked.append(1))
    start = 0
    if os.environ.get("GPUFLEET_RESUME_FROM"):
        state = Path(os.environ["GPUFLEET_RESUME_FROM"]) / "state.json"
        start = json.loads(state.read_text())["step"]
    note("start")
    append(steps_out, f"resume {ids} {start}\\n")
    for n in range(start + 1, steps + 1):
        time.sleep(%(step)s)
        append(steps_out, f"step {ids} {n}\\n")
        if n %% every == 0 or asked:
            asked.clear()
            folder = Path("output") / f"checkpoint-{n}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "state.json").write_text(json.dumps({"step": n}))
            progress.checkpoint(str(folder), step=n)
    Path("result.json").write_text(json.dumps({"steps": steps, "job": ids.split()[0]}))
    note("end")
""") % {"step": STEP_S}


def test_preempted_and_killed_jobs_resume_from_their_checkpoints(fleet: Fleet) -> None:
    workers = fleet.start(workers=3)
    steps_file = fleet.root / "steps.txt"
    count = max(6, weighted_share(10) // 3)
    acked: list[str] = []
    total: dict[str, int] = {}  # job → its steps
    with fleet.server.admin() as admin:
        for _ in range(count):
            steps = fleet.rng.randint(25, 45)
            body = {
                "config": {
                    "command": [
                        PYTHON,
                        "-c",
                        JOB,
                        str(fleet.results),
                        str(steps_file),
                        str(steps),
                        str(EVERY),
                    ],
                },
                "target": "worker",
                "worker_labels": fleet.labels,
                "max_retries": 2,
            }
            resp = admin.post("/api/queue/submit", json=body)
            assert resp.status_code == 201, resp.text
            acked.append(resp.json()["id"])
            total[acked[-1]] = steps
    fleet.submit([], pace=0)  # nothing more: the jobs above are the run
    killed: dict[str, list[float]] = defaultdict(list)
    preemptions = 0
    noticed = 0
    for i in range(max(4, count // 2)):
        time.sleep(fleet.rng.uniform(0.8, 2.0))
        busy = fleet.wait_for_work(
            lambda: far_from_done(fleet, steps_file, total),
            what=f"a worker with a running job {LEFT_STEPS} steps from its end at least",
        )
        if not busy:
            break
        worker, _job = fleet.rng.choice(busy)
        if i % 2 == 0:
            fleet.faults.instant("preemption notice (worker SIGTERM)", (worker.id,))
            worker.signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0, worker.log()
            noticed += 1
        else:
            killed[worker.id].append(time.time())
            fleet.faults.instant("preemption without notice (worker SIGKILL)", (worker.id,))
            worker.signal(signal.SIGKILL)
            worker.wait()
        preemptions += 1
        fleet.restart_worker(worker)
    fleet.settle()
    repeated = check_resumes(fleet, acked, steps_file.read_text().splitlines())
    report = conclude(fleet, acked, killed, preemptions=preemptions, repeated_steps=repeated)
    assert report.attempt_outcomes.get("preempted", 0) >= 1, report.attempt_outcomes
    unnoticed = preemptions - noticed
    assert repeated <= noticed * EVERY + unnoticed * 2 * EVERY, (repeated, noticed, unnoticed)
    assert all(w.running() for w in workers)


def far_from_done(
    fleet: Fleet, steps_file: Path, total: dict[str, int]
) -> list[tuple[WorkerProcess, str]]:
    """Busy workers whose job has `LEFT_STEPS` steps to run at least, by the newest step its
    attempts wrote (the current attempt's, or, before its first step, the step it resumed
    from or one its predecessor reached: a later one, so the count errs on the short side)."""
    reached: dict[str, int] = {}
    lines = steps_file.read_text().splitlines() if steps_file.exists() else []
    for line in lines:
        _kind, job_id, _attempt, n = line.split()
        reached[job_id] = int(n)
    return [
        (worker, job_id)
        for worker, job_id, _began in fleet.busy_since()
        if total[job_id] - reached.get(job_id, 0) >= LEFT_STEPS
    ]


def check_resumes(fleet: Fleet, job_ids: list[str], lines: list[str]) -> int:
    """The issue's three invariants (module docstring); the total of steps run twice."""
    reached: dict[str, int] = defaultdict(int)  # attempt → the last step it ran
    began: dict[str, int] = {}  # attempt → the step it resumed from
    for line in lines:
        kind, _job, attempt, n = line.split()
        if kind == "step":
            reached[attempt] = max(reached[attempt], int(n))
        else:
            began[attempt] = int(n)
    repeated = 0
    with fleet.server.admin() as admin:
        for job_id in job_ids:
            job = admin.get(f"/api/queue/{job_id}").json()
            files = admin.get(f"/api/queue/{job_id}/artifacts").json()
            history = sorted(job["attempt_history"], key=lambda a: a["number"])
            if job["status"] == "completed":
                assert_result_home(admin, job, files)
            for n, after in enumerate(history):
                ran_before = [a for a in history[:n] if a["id"] in reached]
                if after["id"] not in began or not ran_before:
                    continue  # never ran, or the first to run
                before = ran_before[-1]
                resumed = after["resumed_from"]
                usable = [
                    c
                    for c in files["checkpoints"]
                    if c["attempt_number"] < after["number"]
                    and epoch(c["created_at"]) <= epoch(after["offered_at"])
                ]
                newest = max(usable, key=lambda c: (c["step"], c["created_at"]), default=None)
                if newest is None:
                    assert resumed is None, (job_id, after)
                    assert began[after["id"]] == 0, (job_id, after)
                else:
                    assert resumed is not None, (job_id, after, newest)
                    assert resumed["checkpoint"] == newest["name"], (job_id, resumed, newest)
                    assert began[after["id"]] == newest["step"], (job_id, after)
                    source = next(a for a in history if a["number"] == resumed["attempt_number"])
                    # the checkpoint was made while its attempt was the job's live one
                    assert epoch(newest["created_at"]) <= epoch(source["ended_at"]) + 1e-3
                repeated += max(0, reached[before["id"]] - began[after["id"]])
    return repeated


def assert_result_home(admin: Any, job: dict[str, Any], files: dict[str, Any]) -> None:
    final = [
        a
        for a in files["artifacts"]
        if a["attempt_id"] == job["current_attempt_id"] and a["path"] == "result.json"
    ]
    assert len(final) == 1, (job["id"], files["artifacts"])
    resp = admin.get(
        f"/api/queue/{job['id']}/artifacts/result.json",
        params={"attempt_id": job["current_attempt_id"]},
        follow_redirects=True,
    )
    assert resp.status_code == 200, resp.text
    assert hashlib.sha256(resp.content).hexdigest() == final[0]["sha256"]
