"""The scenarios: each starts its own server, runs its fleet, and returns a Result.

Clocks: the workers stamp what they see with `time.monotonic()`, the system-wide
CLOCK_MONOTONIC on Linux, so the submitter's and the workers' stamps compare across
processes. Recovery compares with the server's audit timestamps, so it uses the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from bench.report import Result, ms_summary
from bench.server import BenchServer, fresh_postgres, running_replicas, running_server
from bench.workers import COMPLETE, HOLD, Fleet, Seen, create_workers

NOWHERE = {"pool": "nowhere"}  # the label of scenario 4's jobs: no connected worker has it
ANYWHERE = {"pool": "bench"}
PG_DEFAULT = "postgresql+asyncpg://root@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Size:
    name: str
    s1_workers: int = 1000
    s1_jobs: int = 2000
    s2_workers: int = 1000
    s2_jobs: int = 20_000
    s2_concurrency: int = 32
    s2_deadline: float = 300.0
    s3_workers: int = 10_000
    s3_intervals: tuple[float, float] = (30.0, 3.0)
    s3_windows: tuple[float, float] = (65.0, 30.0)
    s3_connect_within: float = 600.0  # then measure with the workers streaming by then
    s4_depth: int = 100_000
    s4_budget: float = 180.0  # seconds of submitting on the deep queue
    s5_workers: int = 200
    s5_busy: int = 100
    s5_timeouts: tuple[float, float] = (5.0, 1.0)  # heartbeat timeout, health interval
    per_process: int = 2500
    start_within: float = 900.0


FULL = Size("full")
SMOKE = Size(
    "smoke",
    s1_workers=4,
    s1_jobs=6,
    s2_workers=4,
    s2_jobs=20,
    s2_concurrency=4,
    s2_deadline=60.0,
    s3_workers=6,
    s3_intervals=(1.0, 0.3),
    s3_windows=(1.2, 1.0),
    s3_connect_within=60.0,
    s4_depth=50,
    s5_workers=6,
    s5_busy=4,
    s5_timeouts=(2.0, 0.5),
    per_process=3,
    start_within=60.0,
)
# A tenth of the work at the full fleet sizes: minutes, not an hour.
MEDIUM = Size(
    "medium",
    s1_jobs=200,
    s2_jobs=2000,
    s2_deadline=300.0,
    s3_workers=2000,
    s3_windows=(35.0, 15.0),
    s4_depth=20_000,
)
SIZES = {"full": FULL, "medium": MEDIUM, "smoke": SMOKE}


@dataclass
class Options:
    size: Size
    # None: SQLite in each server's data folder. A PostgreSQL URL: each scenario gets a
    # fresh database on that server, dropped afterwards.
    database_url: str | None = None
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gf-bench-")))
    profile_dir: Path | None = None  # py-spy stacks of each scenario's server
    replicas: int = 1  # above 1: that many servers on the PostgreSQL database (scenario 6)
    # Scenario 1 again with one job in the fleet at a time (scenario 6: the latency of the
    # way to a worker, one replica against two, without the backlog of a saturated box).
    paced: bool = False

    @property
    def database(self) -> str:
        name = "postgresql" if self.database_url else "sqlite"
        return f"{name} x{self.replicas}" if self.replicas > 1 else name

    def data_dir(self, scenario: str) -> Path:
        return self.work_dir / f"{scenario}-{self.database}-{secrets.token_hex(3)}"

    @contextlib.asynccontextmanager
    async def server(self, scenario: str, **flags: Any) -> AsyncIterator[BenchServer]:
        """A server of its own for one scenario, on SQLite or a fresh PostgreSQL database."""
        async with contextlib.AsyncExitStack() as stack:
            url = None
            if self.database_url:
                url = await stack.enter_async_context(fresh_postgres(self.database_url))
            profile = None
            if self.profile_dir is not None:
                profile = self.profile_dir / f"{scenario}-{self.database}.txt"
            data_dir = self.data_dir(scenario)
            if self.replicas > 1:
                assert url is not None, "replicas share a PostgreSQL database"
                yield stack.enter_context(
                    running_replicas(data_dir, url, profile, self.replicas, **flags)
                )
            else:
                yield stack.enter_context(running_server(data_dir, url, profile, **flags))


# ---- shared steps -----------------------------------------------------------------------


def say(message: str) -> None:
    """Progress on stderr: full runs take minutes."""
    print(f"  {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def fleet_of(
    server: BenchServer,
    count: int,
    opts: Options,
    *,
    mode: str = COMPLETE,
    hb: float = 30.0,
    partial_after: float | None = None,
) -> AsyncIterator[tuple[Fleet, dict[str, float]]]:
    """`count` simulated workers, created, registered and streaming."""
    began = time.monotonic()
    say(f"creating {count} workers")
    creds = await create_workers(server.url, server.admin_headers(), count, labels=ANYWHERE)
    created = time.monotonic() - began
    say(f"created in {created:.1f} s; registering and opening streams")
    fleet = Fleet(
        server.worker_url,
        creds,
        mode=mode,
        heartbeat_interval=hb,
        per_process=opts.size.per_process,
    )
    try:
        within = partial_after or opts.size.start_within
        took = await fleet.start(within, progress=say, partial=partial_after is not None)
        streaming = (await fleet.status())["connected"]
        say(f"{streaming} workers streaming after {took:.1f} s")
        yield (
            fleet,
            {"create_s": round(created, 2), "connect_s": round(took, 2), "streaming": streaming},
        )
    finally:
        await fleet.stop()


def admin_client(server: BenchServer, connections: int = 8) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers=server.admin_headers(),
        timeout=120,
        limits=httpx.Limits(max_connections=connections + 4),
    )


async def submit(
    client: httpx.AsyncClient, labels: dict[str, str] = ANYWHERE
) -> tuple[str, float, float]:
    """Submit a zero-length job; its id, and the monotonic times of sending and answer."""
    body = {"config": {"command": ["true"]}, "target": "worker", "worker_labels": labels}
    sent = time.monotonic()
    resp = await client.post("/api/queue/submit", json=body)
    answered = time.monotonic()
    if resp.status_code != 201:
        raise SubmitRefused(f"submit: {resp.status_code} {resp.text[:300]}")
    return str(resp.json()["id"]), sent, answered


class SubmitRefused(RuntimeError):
    """The server answered a submit with an error: counted, and the run goes on."""


def first(seen: Iterable[Seen], kind: str) -> dict[str, Seen]:
    """The first `kind` event per job."""
    out: dict[str, Seen] = {}
    for s in sorted(seen, key=lambda s: s.mono):
        if s.kind == kind:
            out.setdefault(s.job_id, s)
    return out


# ---- 1. dispatch latency ------------------------------------------------------------------


async def _latency_run(
    server: BenchServer, fleet: Fleet, jobs: int, budget: float = 600.0, paced: bool = False
) -> dict[str, Any]:
    """Submit `jobs` one at a time, for at most `budget` seconds; submit answer → event.

    Each submit follows the previous answer; `paced`, the previous job's completion (one job
    in the fleet at a time), so that what is timed is the way to an idle worker, not a
    backlog of the workers' reports."""
    await fleet.collect()  # forget what came before
    submitted: dict[str, tuple[float, float]] = {}
    refused: list[str] = []
    unfinished = 0
    say(
        f"submitting {jobs} jobs one at a time"
        + (", each after the last completed" if paced else "")
    )
    stop_at = time.monotonic() + budget
    # Only a paced run hears completions: the others leave the workers' pipes quiet.
    follow = fleet.following() if paced else contextlib.nullcontext(None)
    async with admin_client(server) as client, follow as completions:
        for _ in range(jobs):
            if time.monotonic() > stop_at:
                say(f"stopped submitting after {budget:g} s: {len(submitted)} of {jobs} jobs")
                break
            try:
                job_id, sent, answered = await submit(client)
            except SubmitRefused as exc:
                refused.append(str(exc)[:200])
                continue
            submitted[job_id] = (sent, answered)
            if completions is not None and not await completions.wait(job_id, within=30.0):
                unfinished += 1
    before = (await fleet.status())["counts"].get("done", 0)
    seen: list[Seen] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        more, _beats = await fleet.collect()
        seen += more
        if len(first(seen, "offer").keys() & submitted.keys()) >= len(submitted):
            break
        await asyncio.sleep(0.2)
    offers = first(seen, "offer")
    answer_to_event = [offers[j].mono - a for j, (_s, a) in submitted.items() if j in offers]
    send_to_event = [offers[j].mono - s for j, (s, _a) in submitted.items() if j in offers]
    return {
        "jobs": jobs,
        "submitted": len(submitted),
        "refused": len(refused),
        "refusals": refused[:5],
        "delivered": len(answer_to_event),
        "event_before_answer": sum(1 for v in answer_to_event if v < 0),
        "answer_to_event": ms_summary(answer_to_event),
        "send_to_event": ms_summary(send_to_event),
        "submit_round_trip": ms_summary([a - s for s, a in submitted.values()]),
        "done_before_collect": before,
        "paced": paced,
        "unfinished_within_30s": unfinished,
    }


async def dispatch_latency(opts: Options) -> Result:
    """Scenario 1: idle workers connected, jobs submitted one at a time."""
    size = opts.size
    result = Result(
        "1", "dispatch latency", opts.database, {"workers": size.s1_workers, "jobs": size.s1_jobs}
    )
    async with (
        opts.server("s1") as server,
        fleet_of(server, size.s1_workers, opts) as (fleet, startup),
    ):
        result.metrics["startup"] = startup
        server.mark()
        result.metrics.update(await _latency_run(server, fleet, size.s1_jobs))
        result.metrics["server_cpu_share"] = round(server.usage().cpu_share, 3)
        result.metrics.update(_other_replicas(server))
        if opts.paced:
            result.metrics["one_in_flight"] = await _latency_run(
                server, fleet, size.s1_jobs, paced=True
            )
        result.metrics["errors"] = (await fleet.status())["errors"][:10]
    lat = result.metrics["answer_to_event"]
    result.check("p50 submit answer → event (ms)", lat["p50_ms"], "≤ 2", _le(lat["p50_ms"], 2))
    result.check("p90 (ms)", lat["p90_ms"], "-", None)
    result.check("p99 (ms)", lat["p99_ms"], "≤ 10", _le(lat["p99_ms"], 10))
    sent = result.metrics["send_to_event"]
    result.check("p50 submit sent → event (ms)", sent["p50_ms"], "-", None)
    result.check("p99 submit sent → event (ms)", sent["p99_ms"], "-", None)
    _check_cpu(result)
    _check_refused(result, result.metrics["refused"])
    if opts.paced:
        paced = result.metrics["one_in_flight"]
        lat, sent = paced["answer_to_event"], paced["send_to_event"]
        label = "one job in flight:"
        result.check(
            f"{label} p50 answer → event (ms)", lat["p50_ms"], "≤ 2", _le(lat["p50_ms"], 2)
        )
        result.check(f"{label} p99 (ms)", lat["p99_ms"], "≤ 10", _le(lat["p99_ms"], 10))
        result.check(f"{label} p99 sent → event (ms)", sent["p99_ms"], "-", None)
        _check_refused(result, paced["refused"])
        if paced["unfinished_within_30s"]:
            result.check(
                "jobs not completed within 30 s", paced["unfinished_within_30s"], "0", False
            )
    return result


def _other_replicas(server: BenchServer) -> dict[str, Any]:
    """CPU share of the machine used by each other replica (the one the workers stream
    from) since `server.mark()`; nothing on one orchestrator."""
    if not server.others:
        return {}
    return {"other_replicas_cpu_share": [round(o.usage().cpu_share, 3) for o in server.others]}


def _check_cpu(result: Result) -> None:
    """The servers' CPU, as a row of the table: which process ran short, on this box."""
    shares = [
        result.metrics["server_cpu_share"],
        *result.metrics.get("other_replicas_cpu_share", []),
    ]
    label = "server CPU share of the machine" + (
        " (submit replica / workers' replica)" if len(shares) > 1 else ""
    )
    result.check(label, " / ".join(f"{v:.0%}" for v in shares), "-", None)


def _check_refused(result: Result, refused: int) -> None:
    """A submit answered with an error is a finding, not a reason to stop measuring."""
    if refused:
        result.check("submits answered with an error", refused, "0", False)


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


# ---- 2. throughput ------------------------------------------------------------------------


async def throughput(opts: Options) -> Result:
    """Scenario 2: zero-length jobs through submit, offer, ack, running, completed."""
    size = opts.size
    result = Result(
        "2",
        "throughput",
        opts.database,
        {
            "workers": size.s2_workers,
            "jobs": size.s2_jobs,
            "submit_concurrency": size.s2_concurrency,
        },
    )
    async with (
        opts.server("s2") as server,
        fleet_of(server, size.s2_workers, opts) as (fleet, startup),
    ):
        result.metrics["startup"] = startup
        await fleet.collect()
        server.mark()
        run = await _throughput_run(server, fleet, size)
        usage = server.usage()
        result.metrics.update(run)
        result.metrics["server_cpu_share"] = round(usage.cpu_share, 3)
        result.metrics["server_rss_mib"] = round(usage.rss_bytes / 2**20, 1)
        result.metrics.update(_other_replicas(server))
        result.metrics["errors"] = (await fleet.status())["errors"][:10]
    rate = result.metrics["jobs_per_s"]
    result.check("jobs/s, full lifecycle", rate, "≥ 1,000", rate >= 1000)
    e2e = result.metrics["end_to_end"]
    result.check("p99 end to end per job (ms)", e2e["p99_ms"], "-", None)
    _check_cpu(result)
    _check_refused(result, result.metrics["refused"])
    if result.metrics["completed"] < size.s2_jobs:
        result.notes.append(
            f"only {result.metrics['completed']} of {size.s2_jobs} jobs completed within "
            f"{size.s2_deadline:g} s; the rate is over those"
        )
    return result


async def _throughput_run(server: BenchServer, fleet: Fleet, size: Size) -> dict[str, Any]:
    submitted: dict[str, float] = {}
    refused: list[str] = []
    todo = iter(range(size.s2_jobs))
    began = time.monotonic()
    deadline = began + size.s2_deadline

    async with admin_client(server, size.s2_concurrency) as client:

        async def submitter() -> None:
            for _ in todo:
                if time.monotonic() > deadline:
                    return
                try:
                    job_id, sent, _answered = await submit(client)
                except SubmitRefused as exc:
                    refused.append(str(exc)[:200])
                    continue
                submitted[job_id] = sent

        await asyncio.gather(*(submitter() for _ in range(size.s2_concurrency)))
    submit_s = time.monotonic() - began
    say(f"{len(submitted)} jobs submitted in {submit_s:.1f} s; waiting for completions")
    seen: list[Seen] = []
    noted = time.monotonic()
    while time.monotonic() < deadline:
        more, _ = await fleet.collect()
        seen += more
        completed = len(first(seen, "done"))
        if completed >= len(submitted):
            break
        if time.monotonic() - noted > 15:
            noted = time.monotonic()
            say(f"{completed} of {len(submitted)} jobs completed")
        await asyncio.sleep(0.5)
    more, _ = await fleet.collect()
    done = first(seen + more, "done")
    finished = [done[j].mono for j in submitted if j in done]
    span = (max(finished) - began) if finished else float("nan")
    e2e = [done[j].mono - s for j, s in submitted.items() if j in done]
    return {
        "submitted": len(submitted),
        "refused": len(refused),
        "refusals": refused[:5],
        "completed": len(finished),
        "seconds": round(span, 2),
        "submit_seconds": round(submit_s, 2),
        "jobs_per_s": round(len(finished) / span, 1) if finished else 0.0,
        "end_to_end": ms_summary(e2e),
    }


# ---- 3. capacity --------------------------------------------------------------------------


async def capacity(opts: Options) -> Result:
    """Scenario 3: many connected workers heartbeating slowly, then ten times as often."""
    size = opts.size
    slow, fast = size.s3_intervals
    result = Result(
        "3",
        "capacity",
        opts.database,
        {
            "workers": size.s3_workers,
            "heartbeat_s": [slow, fast],
            "windows_s": list(size.s3_windows),
        },
    )
    async with (
        opts.server("s3") as server,
        fleet_of(server, size.s3_workers, opts, hb=slow, partial_after=size.s3_connect_within) as (
            fleet,
            startup,
        ),
    ):
        result.metrics["startup"] = startup
        if startup["streaming"] < size.s3_workers:
            result.notes.append(
                f"only {startup['streaming']:,} of {size.s3_workers:,} workers were streaming "
                f"after {size.s3_connect_within:g} s of connecting; measured with those"
            )
        result.metrics["rss_idle_mib"] = round(server.usage().rss_bytes / 2**20, 1)
        for phase, interval, window in zip(
            ("slow", "fast"), size.s3_intervals, size.s3_windows, strict=True
        ):
            result.metrics[phase] = await _heartbeat_phase(server, fleet, phase, interval, window)
        status = await fleet.status()
        result.metrics["connected_at_end"] = status["connected"]
        result.metrics["errors"] = status["errors"][:10]
    s, f = result.metrics["slow"], result.metrics["fast"]
    result.check(
        "workers streaming",
        result.metrics["startup"]["streaming"],
        f"{size.s3_workers:,}",
        result.metrics["startup"]["streaming"] >= size.s3_workers,
    )
    result.check(
        f"heartbeat p99 at {slow:g} s (ms)",
        s["heartbeats"]["p99_ms"],
        "≤ 50",
        _le(s["heartbeats"]["p99_ms"], 50),
    )
    result.check(f"heartbeat p99 at {fast:g} s (ms)", f["heartbeats"]["p99_ms"], "-", None)
    result.check(
        "server CPU share, slow / fast",
        f"{s['server_cpu_share']:.0%} / {f['server_cpu_share']:.0%}",
        "-",
        None,
    )
    rss = max(s["server_rss_mib"], f["server_rss_mib"])
    result.check("server resident memory (MiB)", rss, "≤ 1,024", rss <= 1024)
    return result


async def _heartbeat_phase(
    server: BenchServer, fleet: Fleet, phase: str, interval: float, window: float
) -> dict[str, Any]:
    say(f"heartbeats every {interval:g} s, measured for {window:g} s")
    await fleet.set_heartbeat(phase, interval)
    await fleet.collect()
    server.mark()
    await asyncio.sleep(window)
    usage = server.usage()
    _seen, beats = await fleet.collect()
    mine = [b for b in beats if b[0] == phase]
    lat = [b[1] for b in mine if b[2] == 200]
    return {
        "interval_s": interval,
        "heartbeats": ms_summary(lat),
        "failed": len(mine) - len(lat),
        "per_s": round(len(lat) / window, 1),
        "server_cpu_share": round(usage.cpu_share, 3),
        "server_rss_mib": round(usage.rss_bytes / 2**20, 1),
    }


# ---- 4. queue depth -----------------------------------------------------------------------


async def insert_unmatched_jobs(database_url: str, depth: int) -> float:
    """Put `depth` queued jobs no connected worker matches straight into the database.

    Through the API this would take minutes; the rows are what submit writes (minus the
    audit events), older than every job the scenario times, so they sit at the head of the
    queue.
    """
    from gpufleet.domain.secrets import new_id
    from gpufleet.store.tables import jobs

    began = time.monotonic()
    engine = create_async_engine(database_url)
    start = datetime.now(UTC) - timedelta(seconds=depth / 1000 + 60)
    try:
        for chunk in range(0, depth, 5000):
            rows = [
                {
                    "id": new_id("j"),
                    "status": "queued",
                    "config": {"command": ["true"]},
                    "target": "worker",
                    "worker_labels": NOWHERE,
                    "gpu_count": 0,
                    "priority": 0,
                    "max_retries": 0,
                    "retry_on": ["lost"],
                    "attempts": 0,
                    "submitted_by": "bench",
                    "created_at": start + timedelta(milliseconds=i),
                    "updated_at": start + timedelta(milliseconds=i),
                }
                for i in range(chunk, min(depth, chunk + 5000))
            ]
            async with engine.begin() as conn:
                await conn.execute(sa.insert(jobs), rows)
    finally:
        await engine.dispose()
    return time.monotonic() - began


async def queue_depth(opts: Options) -> Result:
    """Scenario 4: scenario 1 on an empty queue, then with a deep queue of unmatched jobs."""
    size = opts.size
    result = Result(
        "4",
        "queue depth",
        opts.database,
        {"workers": size.s1_workers, "jobs": size.s1_jobs, "depth": size.s4_depth},
    )
    async with opts.server("s4") as server:
        # One offline worker with the label makes the unmatched jobs admissible.
        await create_workers(server.url, server.admin_headers(), 1, prefix="parked", labels=NOWHERE)
        async with fleet_of(server, size.s1_workers, opts) as (fleet, startup):
            result.metrics["startup"] = startup
            result.metrics["empty"] = await _latency_run(server, fleet, size.s1_jobs)
            url = server.database_url or f"sqlite+aiosqlite:///{server.data_dir / 'gpufleet.db'}"
            say(f"inserting {size.s4_depth:,} unmatched queued jobs")
            result.metrics["insert_s"] = round(await insert_unmatched_jobs(url, size.s4_depth), 2)
            deep = await _latency_run(server, fleet, size.s1_jobs, budget=size.s4_budget)
            result.metrics["deep"] = deep
            if deep["submitted"] < size.s1_jobs:
                result.notes.append(
                    f"deep queue: only {deep['submitted']} of {size.s1_jobs} jobs could be "
                    f"submitted in {size.s4_budget:g} s"
                )
            result.metrics["errors"] = (await fleet.status())["errors"][:10]
    empty = result.metrics["empty"]["answer_to_event"]["p99_ms"]
    deep = result.metrics["deep"]["answer_to_event"]["p99_ms"]
    result.check("p99 empty queue (ms)", empty, "-", None)
    ok = None if empty is None or deep is None else deep <= 1.5 * max(empty, 0.001)
    result.check(f"p99 with {size.s4_depth:,} queued (ms)", deep, "≤ 1.5x empty", ok)
    _check_refused(result, result.metrics["empty"]["refused"] + result.metrics["deep"]["refused"])
    return result


# ---- 5. recovery --------------------------------------------------------------------------


async def recovery(opts: Options) -> Result:
    """Scenario 5: kill a tenth of the busy workers; their jobs must run again, once."""
    size = opts.size
    timeout, health = size.s5_timeouts
    result = Result(
        "5",
        "recovery",
        opts.database,
        {
            "workers": size.s5_workers,
            "busy": size.s5_busy,
            "heartbeat_timeout_s": timeout,
            "health_interval_s": health,
        },
    )
    beat = min(1.0, timeout / 5)
    flags = {"heartbeat-timeout": timeout, "health-interval": health, "heartbeat-interval": beat}
    async with (
        opts.server("s5", **flags) as server,
        fleet_of(server, size.s5_workers, opts, mode=HOLD, hb=beat) as (fleet, startup),
    ):
        result.metrics["startup"] = startup
        result.metrics.update(await _recovery_run(server, fleet, size.s5_busy, timeout))
    limit = timeout + health + 1
    worst = result.metrics["ran_again_s"]["max_ms"]
    worst_s = None if worst is None else worst / 1000
    result.check("lost jobs", result.metrics["lost"], "-", None)
    result.check("worst kill → requeued (s)", _s(result.metrics["requeued_s"]["max_ms"]), "-", None)
    result.check(
        "worst kill → running again (s)",
        worst_s,
        f"≤ {limit:g}",
        None
        if worst_s is None
        else worst_s <= limit and result.metrics["ran_again"] == result.metrics["lost"],
    )
    result.check("duplicates", result.metrics["duplicates"], "0", result.metrics["duplicates"] == 0)
    return result


def _s(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 2)


async def _recovery_run(
    server: BenchServer, fleet: Fleet, busy: int, heartbeat_timeout: float
) -> dict[str, Any]:
    async with admin_client(server) as client:
        jobs = [(await submit(client))[0] for _ in range(busy)]
        running = await fleet.wait_for("running", busy, 60)
        holders = await fleet.busy()
        victims = random.sample(holders, max(1, len(holders) // 10))
        killed_at = time.time()
        await fleet.kill(w for w, _j, _a in victims)
        lost = {j: (w, a) for w, j, a in victims}
        deadline = time.monotonic() + heartbeat_timeout * 4 + 10
        seen: list[Seen] = []
        while time.monotonic() < deadline:
            more, _ = await fleet.collect()
            seen += more
            if _reruns(seen, lost).keys() >= lost.keys():
                break
            await asyncio.sleep(0.1)
        requeued = [await _lost_at(client, j) for j in lost]
        await fleet.finish()
        await fleet.wait_for("done", busy, 30)
        more, _ = await fleet.collect()
        seen += more
        finals = [(await client.get(f"/api/queue/{j}")).json() for j in jobs]
    reran = _reruns(seen, lost)
    return {
        "running_before_kill": running,
        "lost": len(lost),
        "requeued_s": ms_summary([t - killed_at for t in requeued if t is not None]),
        "ran_again": len(reran),
        "ran_again_s": ms_summary([t - killed_at for t in reran.values()]),
        "duplicates": _duplicates(seen, finals, {w for w, _j, _a in victims}),
        "completed": sum(1 for f in finals if f["status"] == "completed"),
    }


def _reruns(seen: list[Seen], lost: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Lost job → wall time it ran again, on a new attempt."""
    out: dict[str, float] = {}
    for s in sorted(seen, key=lambda s: s.wall):
        if s.kind == "running" and s.job_id in lost and s.attempt_id != lost[s.job_id][1]:
            out.setdefault(s.job_id, s.wall)
    return out


async def _lost_at(client: httpx.AsyncClient, job_id: str) -> float | None:
    """When the server ended the job's lost attempt (its audit record), as a wall time."""
    resp = await client.get("/api/audit", params={"type": "attempt.ended", "target": job_id})
    for event in resp.json()["events"]:
        if event["detail"].get("outcome") == "lost":
            return datetime.fromisoformat(event["ts"]).timestamp()
    return None


def _duplicates(seen: list[Seen], finals: list[dict[str, Any]], dead: set[str]) -> int:
    """Runs beyond one per job among live workers, plus extra completed attempts."""
    runs: dict[str, set[str]] = {}
    for s in seen:
        if s.kind == "running" and s.worker_id not in dead:
            runs.setdefault(s.job_id, set()).add(s.attempt_id)
    extra = sum(len(a) - 1 for a in runs.values() if len(a) > 1)
    for job in finals:
        completed = [a for a in job.get("attempt_history", []) if a["status"] == "completed"]
        extra += max(0, len(completed) - 1)
    return extra


# ---- 6. side by side ----------------------------------------------------------------------


async def side_by_side(opts: Options) -> list[Result]:
    """Scenario 6: scenarios 1 and 2 on PostgreSQL, on one orchestrator then on two replicas
    (submits to one, workers streaming from the other: every offer crosses replicas)."""
    results: list[Result] = []
    url = opts.database_url or PG_DEFAULT
    for replicas, prefix in ((1, "6"), (2, "6/r")):
        pg = Options(opts.size, url, opts.work_dir, opts.profile_dir, replicas=replicas, paced=True)
        for run in (dispatch_latency, throughput):
            r = await run(pg)
            r.scenario = f"{prefix}/{r.scenario}" if replicas > 1 else f"6/{r.scenario}"
            results.append(r)
    return results


SCENARIOS: dict[int, Any] = {
    1: dispatch_latency,
    2: throughput,
    3: capacity,
    4: queue_depth,
    5: recovery,
    6: side_by_side,
}
