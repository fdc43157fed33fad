"""A fleet under fire: an orchestrator, real `gpufleet worker` processes, a relay between them
that the test can cut, and a steady stream of short jobs that leave their own trace.

Every job runs `JOB`: it appends `start`, then `end` (or `stop` when it is told to stop) lines
to a results file shared by the whole fleet, one `O_APPEND` write each:

    <kind> <job id> <attempt id> <pid> <unix time>

That file is the ground truth the invariants are checked against (which attempts really ran,
when, and whether one ran twice), beside what the orchestrator's API says.

Size: `GPUFLEET_CHAOS_JOBS` jobs over the whole tier (default 70), shared among the scenarios by
weight; a fault does not rely on their volume: it waits for its job (`Fleet.wait_for_work`);
`GPUFLEET_CHAOS_SEED` fixes the random choices (a fresh seed is printed);
`GPUFLEET_CHAOS_DATABASE_URL` runs the orchestrator on PostgreSQL instead of SQLite.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.proxy import Proxy
from tests.chaos.replicas import ReplicaSet
from tests.e2e.conftest import (
    PYTHON,
    ServerProcess,
    WorkerProcess,
    unique,
)
from tests.waiting import wait_until

TOTAL_JOBS = int(os.environ.get("GPUFLEET_CHAOS_JOBS", "70"))
SEED = int(os.environ.get("GPUFLEET_CHAOS_SEED", str(random.randrange(1 << 30))))
DATABASE_URL = os.environ.get("GPUFLEET_CHAOS_DATABASE_URL") or None
TERMINAL = ("completed", "failed", "cancelled")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output" / "chaos"

HEARTBEAT_TIMEOUT = 3.0  # ServerProcess's default: the orchestrator's patience with a worker
# The workers' --reconnect-max (default 30 s): a repair is seen within 2 s. A restarted
# orchestrator's health grace (one heartbeat timeout) must outlast it, and reports' retries.
RECONNECT_MAX = 2.0
CAP = ("--reconnect-max", str(RECONNECT_MAX))
RESTART_HEARTBEAT_TIMEOUT = 10.0
CANCEL_GRACE = 1.0  # WorkerProcess's default: SIGTERM, then SIGKILL this much later
# How long the process of an attempt the orchestrator has ended may still run once its worker
# can hear it again: the reconnect cap, one heartbeat interval, the cancel grace, and slack.
FENCING_WINDOW = RECONNECT_MAX + 0.5 + CANCEL_GRACE + 5.5

# What every job notes in the results file argv[1]: `note(kind)` writes `<kind> <job id>
# <attempt id> <pid> <unix time>`, and a node of a multi-node job its rank after them; SIGTERM
# notes `stop` and exits.
NOTES = textwrap.dedent("""
    import os, signal, sys, time
    out = sys.argv[1]
    ids = os.environ["GPUFLEET_JOB_ID"] + " " + os.environ["GPUFLEET_ATTEMPT_ID"]
    node = os.environ.get("GPUFLEET_NODE_RANK")
    def note(kind):
        line = f"{kind} {ids} {os.getpid()} {time.time():.6f}" + (f" {node}" if node else "")
        fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (line + "\\n").encode())
        os.close(fd)
    def stop(*_):
        note("stop")
        os._exit(143)
    signal.signal(signal.SIGTERM, stop)
""")
# Sleeps argv[2] seconds; notes its start and its end (or its stop on SIGTERM).
JOB = NOTES + textwrap.dedent("""
    note("start")
    time.sleep(float(sys.argv[2]))
    note("end")
    print("done", flush=True)
""")


@dataclass(frozen=True)
class Fault:
    kind: str
    started: float  # unix time
    ended: float
    workers: tuple[str, ...] | None  # None: every worker (the orchestrator itself went away)

    def cuts_off(self, worker_id: str) -> bool:
        return self.workers is None or worker_id in self.workers


@dataclass
class FaultLog:
    faults: list[Fault] = field(default_factory=list)
    fed: int = 0  # jobs submitted for a fault to catch, the fleet being out of work

    @contextlib.contextmanager
    def window(self, kind: str, workers: tuple[str, ...] | None) -> Iterator[None]:
        """Record the fault injected inside the block, from its start to its repair."""
        started = time.time()
        try:
            yield
        finally:
            self.faults.append(Fault(kind, started, time.time(), workers))

    def instant(self, kind: str, workers: tuple[str, ...] | None) -> None:
        now = time.time()
        self.faults.append(Fault(kind, now, now, workers))

    def count(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fault in self.faults:
            counts[fault.kind] = counts.get(fault.kind, 0) + 1
        return counts


@dataclass(frozen=True)
class Plan:
    seconds: float
    max_retries: int


class Via:
    """What `WorkerProcess` uses of a server, with the workers' URL pointing at the relay."""

    tls = False

    def __init__(self, server: ServerProcess, url: str) -> None:
        self._server = server
        self.url = url

    def admin(self) -> httpx.Client:
        return self._server.admin()


class Submitter(threading.Thread):
    """Submits planned jobs at a steady pace, as a client would: a submit that gets no 201
    (the orchestrator is down, the answer was lost) is tried again, and only a 201 counts as
    acknowledged."""

    def __init__(self, fleet: Fleet, plans: list[Plan], pace: float) -> None:
        super().__init__(name="chaos-submitter", daemon=True)
        self.fleet = fleet
        self.plans = plans
        self.pace = pace
        self.acked: list[str] = []
        self.sent: dict[str, Plan] = {}  # acknowledged job id → its plan
        self.unacked_tries = 0
        self.failure: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            for plan in self.plans:
                self.record(self._submit(plan), plan)
                time.sleep(self.pace)
        except BaseException as exc:
            self.failure = exc
        finally:
            self.done.set()

    def record(self, job_id: str, plan: Plan) -> None:
        self.sent[job_id] = plan
        self.acked.append(job_id)

    def _submit(self, plan: Plan) -> str:
        command = [PYTHON, "-I", "-S", "-c", JOB, str(self.fleet.results), f"{plan.seconds:.3f}"]
        body = {
            "config": {"command": command},
            "target": "worker",
            "worker_labels": self.fleet.labels,
            "max_retries": plan.max_retries,
        }

        def acknowledged() -> str | None:
            try:
                with self.fleet.server.admin() as admin:
                    resp = admin.post("/api/queue/submit", json=body)
                if resp.status_code == 201:
                    return str(resp.json()["id"])
            except (httpx.HTTPError, OSError):
                pass
            self.unacked_tries += 1
            return None

        return wait_until(acknowledged, timeout=120, message="an acknowledged submit")

    def wait(self, timeout: float = 300) -> list[str]:
        if not self.done.wait(timeout):
            raise AssertionError(f"the submitter did not finish within {timeout} s")
        if self.failure is not None:
            raise self.failure
        return self.acked


class Fleet:
    """One scenario's orchestrator, relay and workers; everything is stopped at the end."""

    def __init__(self, root: Path, name: str, rng: random.Random) -> None:
        self.root = root
        self.name = name
        self.rng = rng
        self.server: Any = ServerProcess(root / "orchestrator", DATABASE_URL)  # or a ReplicaSet
        self.results = root / "results.txt"
        self.labels = {"pool": unique("chaos")}
        self.faults = FaultLog()
        self.proxy: Proxy | None = None
        self.workers: list[WorkerProcess] = []
        self.restarted: dict[str, float] = {}  # worker id → when its agent was started again
        self.submitter: Submitter | None = None
        self.started = time.time()

    def start(
        self, *, workers: int, via_proxy: int = 0, **server_flags: Any
    ) -> list[WorkerProcess]:
        """The orchestrator, then `workers` workers, the first `via_proxy` behind the relay."""
        self.server.flags.update(server_flags)
        self.server.start()
        if via_proxy:
            self.proxy = Proxy(self.server.port).start()
        for i in range(workers):
            behind = via_proxy > i and self.proxy is not None
            target: Any = Via(self.server, self.proxy.url) if behind else self.server
            labels = {**self.labels, "slot": str(i)}
            w = WorkerProcess(target, self.root, persistent=True, labels=labels, extra_args=CAP)
            self.workers.append(w)
        with ThreadPoolExecutor(len(self.workers)) as pool:  # each start waits to connect
            list(pool.map(WorkerProcess.start, self.workers))
        return self.workers

    def plans(self, count: int, seconds: Callable[[random.Random], float]) -> list[Plan]:
        """`count` jobs of `seconds(rng)` each; retries from 0 to 5, so some jobs can run out."""
        return [Plan(seconds(self.rng), self.rng.choice((0, 1, 2, 3, 5))) for _ in range(count)]

    def submit(self, plans: list[Plan], pace: float) -> Submitter:
        self.submitter = Submitter(self, plans, pace)
        self.submitter.start()
        return self.submitter

    def restart_worker(self, worker: WorkerProcess) -> None:
        """Start a killed worker's agent again, with the same token and work folder."""
        worker.proc = None
        self.restarted[worker.id] = time.time()
        worker.start()

    def busy_workers(self) -> list[tuple[WorkerProcess, str]]:
        """Workers whose own attempt at their job has started (its `start` line is written):
        (worker, job id). Not a worker merely offered a job another worker started before."""
        return [(worker, job_id) for worker, job_id, _began in self.busy_since()]

    def busy_since(self) -> list[tuple[WorkerProcess, str, float]]:
        """`busy_workers`, each with the unix time its attempt's process started."""
        # attempt → when its process started (`start JOB ATTEMPT PID TIME`)
        started = {
            parts[2]: float(parts[4])
            for parts in (line.split() for line in self.result_lines())
            if len(parts) >= 5 and parts[0] == "start"
        }
        busy = []
        with self.server.admin() as admin:
            records = {w["id"]: w for w in admin.get("/api/admin/workers").json()["workers"]}
            for w in self.workers:
                job_id = records[w.id]["current_job_id"]
                if not (w.running() and job_id):
                    continue
                job = admin.get(f"/api/queue/{job_id}").json()
                began = started.get(job["current_attempt_id"])
                # A worker restarted since its attempt began is an agent still starting (its
                # signal handlers not set yet), beside a job the server has not found lost.
                ours = job["worker_id"] == w.id and began is not None
                if ours and began >= self.restarted.get(w.id, 0.0):
                    busy.append((w, job_id, began))
        return busy

    def out_of_work(self) -> bool:
        """Every submit is in and every job has ended: no job is left for a fault to catch."""
        return (
            self.submitter is not None
            and self.submitter.done.is_set()
            and all(j["status"] in TERMINAL for j in self.all_jobs())
        )

    def wait_for_work(
        self,
        predicate: Callable[[], list[Any]],
        what: str,
        timeout: float = 60,
        feed: Callable[[], Plan] | None = None,
    ) -> list[Any]:
        """Wait for `predicate()` to find something (a worker mid-job, say) to inject the next
        fault into. Once the fleet is out of work (every submit in, every job ended: how fast
        the queue drains depends on the machine), one job of `feed()`'s plan a worker is
        submitted for the fault to catch, and the wait goes on; without `feed`, [] then."""
        found: list[Any] = []

        def ready() -> bool:
            found[:] = predicate()
            if found or not self.out_of_work():
                return bool(found)
            if feed is None:
                return True
            for _ in self.workers:  # one each: whichever worker the fault is aimed at
                self.feed(feed())
            return False

        wait_until(ready, timeout=timeout, message=what)
        return found

    def feed(self, plan: Plan) -> str:
        """One more job, submitted once the submitter is done (and counted with its jobs)."""
        assert self.submitter is not None and self.submitter.done.is_set()
        job_id = self.submitter._submit(plan)
        self.submitter.record(job_id, plan)
        self.faults.fed += 1
        return job_id

    def result_lines(self) -> list[str]:
        if not self.results.exists():
            return []
        return self.results.read_text().splitlines()

    def all_jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        with self.server.admin() as admin:
            while True:
                page = admin.get("/api/queue", params={"limit": 500, "offset": len(jobs)}).json()
                jobs += page["jobs"]
                if len(jobs) >= page["total"] or not page["jobs"]:
                    return jobs

    def settle(self, timeout: float = 180) -> None:
        """Wait for every submit, then for every job to reach a terminal state (or for every
        worker to be gone: nothing would end then)."""
        assert self.submitter is not None
        self.submitter.wait()
        with contextlib.suppress(AssertionError):  # the invariants name what did not end
            wait_until(
                lambda: (
                    not any(w.running() for w in self.workers)
                    or all(j["status"] in TERMINAL for j in self.all_jobs())
                ),
                timeout=timeout,
                message="every job to end",
            )

    def stop(self) -> None:
        for worker in self.workers:
            if worker.running():
                assert worker.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGCONT)  # a frozen one cannot die otherwise
            worker.stop()
        if self.proxy is not None:
            self.proxy.stop()
        self.server.kill(signal.SIGTERM)


def weighted_share(weight: int) -> int:
    """This scenario's share of GPUFLEET_CHAOS_JOBS (weights sum to 100), at least 10 jobs."""
    return max(10, TOTAL_JOBS * weight // 100)


def _fleet(
    tmp_path: Path, name: str, replicas: int = 1, database_url: str | None = None
) -> Iterator[Fleet]:
    name = name.removeprefix("test_")
    rng = random.Random(f"{SEED}:{name}")
    print(f"\nchaos {name}: seed {SEED} (GPUFLEET_CHAOS_SEED={SEED} repeats it)")
    made = Fleet(tmp_path, name, rng)
    if replicas > 1:
        assert database_url is not None, "replicas share a PostgreSQL database"
        made.server = ReplicaSet(tmp_path / "orchestrators", database_url, replicas, rng)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    yield from _fleet(tmp_path, request.node.name)


@pytest.fixture
def replicated_fleet(
    tmp_path: Path, request: pytest.FixtureRequest, pg_database: str
) -> Iterator[Fleet]:
    """Two orchestrator replicas on one PostgreSQL database; workers know both (one serves
    while the other is down)."""
    yield from _fleet(tmp_path, request.node.name, replicas=2, database_url=pg_database)
