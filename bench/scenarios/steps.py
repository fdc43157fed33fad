"""Steps the scenarios share: a fleet of simulated workers, submits, and checks.

Clocks: the workers stamp what they see with `time.monotonic()`, the system-wide
CLOCK_MONOTONIC on Linux, so the submitter's and the workers' stamps compare across
processes. Recovery compares with the server's audit timestamps, so it uses the wall clock.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

import httpx

from bench.ceiling import Ceiling, measure
from bench.report import Result
from bench.scenarios.options import Options
from bench.server import BenchServer
from bench.workers import COMPLETE, Fleet, Seen, create_workers
from gpufleet.client_tls import verify_for

NOWHERE = {"pool": "nowhere"}  # the label of scenario 4's jobs: no connected worker has it
ANYWHERE = {"pool": "bench"}
PG_DEFAULT = "postgresql+asyncpg://root@127.0.0.1:5432/test"


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
    labels: dict[str, str] = ANYWHERE,
) -> AsyncIterator[tuple[Fleet, dict[str, float]]]:
    """`count` simulated workers of `labels`, created, registered and streaming."""
    began = time.monotonic()
    say(f"creating {count} workers")
    # A fleet's own names: a worker's name is unique, and a shared server (the smoke tests')
    # has other scenarios' fleets registered.
    prefix = f"bench-{secrets.token_hex(3)}"
    creds = await create_workers(
        server.url, server.admin_headers(), count, prefix=prefix, labels=labels
    )
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


def lane() -> dict[str, str]:
    """The label of one scenario's fleet and jobs alone: on a shared server its one held job
    is its own, never a job another scenario left queued (those want `ANYWHERE`)."""
    return {"pool": f"lane-{secrets.token_hex(3)}"}


def admin_client(server: BenchServer, connections: int = 8) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers=server.admin_headers(),
        timeout=120,
        verify=verify_for([server.url], True),  # no CA bundle loaded for plain http
        limits=httpx.Limits(max_connections=connections + 4),
    )


async def submit(
    client: httpx.AsyncClient, labels: dict[str, str] = ANYWHERE, team: str | None = None
) -> tuple[str, float, float]:
    """Submit a zero-length job (of `team`, one of the caller's teams: the caller's default
    team when None); its id, and the monotonic times of sending and answer."""
    body: dict[str, Any] = {
        "config": {"command": ["true"]},
        "target": "worker",
        "worker_labels": labels,
    }
    if team is not None:
        body["team"] = team
    sent = time.monotonic()
    resp = await client.post("/api/queue/submit", json=body)
    answered = time.monotonic()
    if resp.status_code != 201:
        raise SubmitRefused(f"submit: {resp.status_code} {resp.text[:300]}")
    return str(resp.json()["id"]), sent, answered


class SubmitRefused(RuntimeError):
    """The server answered a submit with an error: counted, and the run goes on."""


def teams_in_turn(teams: Sequence[str]) -> Iterator[str | None]:
    """The team of each next submit: `teams` round and round, or always None (no team given)."""
    return itertools.cycle(teams) if teams else itertools.repeat(None)


def first(seen: Iterable[Seen], kind: str) -> dict[str, Seen]:
    """The first `kind` event per job."""
    out: dict[str, Seen] = {}
    for s in sorted(seen, key=lambda s: s.mono):
        if s.kind == kind:
            out.setdefault(s.job_id, s)
    return out


def other_replicas(server: BenchServer) -> dict[str, Any]:
    """CPU share of the machine used by each other replica (the one the workers stream
    from) since `server.mark()`; nothing on one orchestrator."""
    if not server.others:
        return {}
    return {"other_replicas_cpu_share": [round(o.usage().cpu_share, 3) for o in server.others]}


_FLOOR: list[Ceiling] = []  # measured once a run: every per-job ratio divides by the same


def floor(opts: Options) -> Ceiling:
    """An empty endpoint on the same stack, with the simulated workers' client (bench.ceiling):
    its rate and the server CPU a request. Measured on first use, after a scenario's servers
    and fleet are gone, and kept for the rest of the run."""
    if not _FLOOR:
        say(f"measuring the floor: an empty endpoint for {opts.size.floor_seconds:g} s")
        _FLOOR.append(measure(opts.size.floor_seconds, opts.size.floor_processes, client="aiohttp"))
    return _FLOOR[0]


def server_cpu_seconds(server: BenchServer) -> float:
    """CPU seconds since `server.mark()`, summed over every replica."""
    return server.usage().cpu_seconds + sum(o.usage().cpu_seconds for o in server.others)


JOB_REQUESTS = 4  # submit, acknowledged, running, completed


def check_job_cost(result: Result, opts: Options) -> None:
    """#19's goal 1: jobs/s x requests a job / empty requests a second (>= 0.5), and server
    CPU a job / server CPU an empty request (<= 8), from the run's `jobs_per_s`, `completed`
    and `server_cpu_s`."""
    m = result.metrics
    base = floor(opts)
    m["floor"] = {
        "requests_per_s": round(base.per_second, 1),
        "server_cpu_per_request_ms": round(base.server_cpu_per_request_ms, 4),
    }
    per_job = 1000 * m["server_cpu_s"] / m["completed"] if m["completed"] else None
    m["server_cpu_per_job_ms"] = None if per_job is None else round(per_job, 3)
    rate = m["jobs_per_s"] * JOB_REQUESTS / base.per_second if base.per_second else None
    m["rate_vs_floor"] = None if rate is None else round(rate, 4)
    cpu = per_job / base.server_cpu_per_request_ms if per_job and base.requests else None
    m["cpu_vs_floor"] = None if cpu is None else round(cpu, 2)
    result.check(
        f"jobs/s x {JOB_REQUESTS} / empty requests/s ({base.per_second:,.0f})",
        m["rate_vs_floor"],
        "≥ 0.5",
        None if rate is None else rate >= 0.5,
    )
    result.check(
        f"server CPU a job / an empty request's ({base.server_cpu_per_request_ms:.3f} ms)",
        m["cpu_vs_floor"],
        "≤ 8",
        None if cpu is None else cpu <= 8,
    )
    # #39: the figures the ratios are made of, each a row of its own (a --baseline run gives
    # each its current ÷ baseline).
    result.check("server CPU a job (ms)", m["server_cpu_per_job_ms"], "-", None)
    result.check(
        "server CPU an empty request, the floor's (ms)",
        m["floor"]["server_cpu_per_request_ms"],
        "-",
        None,
    )


def check_cpu(result: Result) -> None:
    """The servers' CPU, as a row of the table: which process ran short, on this box."""
    shares = [
        result.metrics["server_cpu_share"],
        *result.metrics.get("other_replicas_cpu_share", []),
    ]
    label = "server CPU share of the machine" + (
        " (submit replica / workers' replica)" if len(shares) > 1 else ""
    )
    result.check(label, " / ".join(f"{v:.0%}" for v in shares), "-", None)


def check_refused(result: Result, refused: int) -> None:
    """A submit answered with an error is a finding, not a reason to stop measuring."""
    if refused:
        result.check("submits answered with an error", refused, "0", False)


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit
