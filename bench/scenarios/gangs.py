"""Scenario 10: multi-node (gang) jobs, submit → every node running, with one-node jobs
competing (#35).

Gangs of each size are submitted in turn, one at a time (the next once the last one's rank 0
completed), while one-node jobs are submitted continuously alongside (a fixed number in
flight, each submitter's next after its last completed). A gang's latency runs from the
submit's answer to the answer of its last node's `running` report (every node acknowledged,
got `job_start` and runs: the attempt runs); a one-node job's, to its `running` report's
answer. The goal: each gang size's p99 at most twice the one-node p99 of the same run.

Over the whole run the workers' notes are checked for the invariant "no partial gang
offered" (`whole_gangs`) and for offers to a worker that holds a job (`double_offers`).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx

from bench.report import Result, ms_summary
from bench.scenarios.options import Options, Size
from bench.scenarios.steps import (
    ANYWHERE,
    SubmitRefused,
    admin_client,
    at_most,
    check_cpu,
    check_refused,
    fleet_of,
    say,
    submit,
)
from bench.server import BenchServer
from bench.workers import Completions, Fleet, Seen

GOAL = 2.0  # each gang size's p99 / the one-node p99


async def submit_gang(client: httpx.AsyncClient, nodes: int) -> tuple[str, float]:
    """Submit a zero-length job of `nodes` nodes; its id and the monotonic time of the answer."""
    body = {
        "config": {"command": ["true"], "nodes": nodes},
        "target": "worker",
        "worker_labels": ANYWHERE,
    }
    resp = await client.post("/api/queue/submit", json=body)
    answered = time.monotonic()
    if resp.status_code != 201:
        raise SubmitRefused(f"submit: {resp.status_code} {resp.text[:300]}")
    return str(resp.json()["id"]), answered


def whole_gangs(seen: Iterable[Seen], gangs: Mapping[str, int]) -> list[str]:
    """What breaks "no partial gang offered": each gang attempt must have been offered to
    exactly its N nodes (N distinct workers, ranks 0..N-1, each offer naming N), and no gang
    offered as a one-node job. One line a broken attempt."""
    by_attempt: dict[str, list[Seen]] = defaultdict(list)
    broken: list[str] = []
    for s in seen:
        if s.kind != "offer" or s.job_id not in gangs:
            continue
        if s.rank is None:
            broken.append(f"{s.attempt_id}: gang {s.job_id} offered to {s.worker_id} as one node")
        else:
            by_attempt[s.attempt_id].append(s)
    for attempt, offers in sorted(by_attempt.items()):
        n = gangs[offers[0].job_id]
        workers = {o.worker_id for o in offers}
        ranks = sorted(o.rank for o in offers if o.rank is not None)
        if len(offers) != n or len(workers) != n or ranks != list(range(n)):
            broken.append(f"{attempt}: {len(workers)} workers, ranks {ranks} of {n} nodes")
        elif any(o.nodes != n for o in offers):
            broken.append(
                f"{attempt}: node counts {sorted({o.nodes or 0 for o in offers})} for {n}"
            )
    return broken


def double_offers(seen: Iterable[Seen]) -> list[str]:
    """Offers to a worker that held another job's attempt, from the server's point of view:
    held from its offer until the worker sent `completed`/`cancelled` for it, had a report
    refused, or (a gang's node) rank 0 sent `completed` for the attempt. The system-wide
    monotonic clock orders the notes of every process: a server that offered after such a
    send may have heard it, one that offered before had not."""
    notes = sorted(seen, key=lambda s: s.mono)
    rank0_end: dict[str, float] = {}
    own_end: dict[tuple[str, str], float] = {}
    for s in notes:
        if s.kind in ("finish", "refused"):
            own_end.setdefault((s.worker_id, s.attempt_id), s.mono)
            if s.kind == "finish" and s.rank == 0:
                rank0_end.setdefault(s.attempt_id, s.mono)
    holding: dict[str, Seen] = {}
    found: list[str] = []
    for s in notes:
        if s.kind != "offer":
            continue
        before = holding.get(s.worker_id)
        if before is not None and before.attempt_id != s.attempt_id:
            ends = [
                t
                for t in (
                    own_end.get((s.worker_id, before.attempt_id)),
                    rank0_end.get(before.attempt_id),
                )
                if t is not None
            ]
            if not ends or min(ends) > s.mono:
                found.append(
                    f"{s.worker_id}: {s.attempt_id} offered while it held {before.attempt_id}"
                )
        holding[s.worker_id] = s
    return found


def latencies(
    seen: Sequence[Seen], singles: Mapping[str, float], gangs: Mapping[str, tuple[int, float]]
) -> tuple[list[float], dict[int, list[float]], list[str]]:
    """Seconds from each submit's answer to its job running (a gang: its last node); the
    one-node jobs', each gang size's, and the gangs that never ran on every node."""
    running: dict[str, dict[str, dict[int | None, float]]] = defaultdict(lambda: defaultdict(dict))
    for s in seen:
        if s.kind == "running":
            running[s.job_id][s.attempt_id].setdefault(s.rank, s.mono)
    one = [
        min(min(r.values()) for r in running[j].values()) - a
        for j, a in singles.items()
        if j in running
    ]
    by_size: dict[int, list[float]] = defaultdict(list)
    never: list[str] = []
    for job_id, (n, answered) in gangs.items():
        whole = [max(r.values()) for r in running.get(job_id, {}).values() if len(r) == n]
        if whole:
            by_size[n].append(min(whole) - answered)
        else:
            never.append(job_id)
    return one, dict(by_size), never


async def singles_alongside(
    client: httpx.AsyncClient, done: Completions, stop: asyncio.Event, out: dict[str, float]
) -> int:
    """One submitter of one-node jobs: submit, wait for the completion, again, until `stop`;
    how many submits were refused."""
    refused = 0
    while not stop.is_set():
        try:
            job_id, _sent, answered = await submit(client)
        except SubmitRefused:
            refused += 1
            continue
        out[job_id] = answered
        await done.wait(job_id, within=60.0)
    return refused


async def mixed(
    server: BenchServer, fleet: Fleet, size: Size
) -> tuple[dict[str, float], dict[str, tuple[int, float]], int, int]:
    """Gangs of each size in turn, one at a time, one-node jobs alongside: the one-node jobs'
    submit answers, the gangs' sizes and answers, gangs unfinished within 60 s, refusals."""
    singles: dict[str, float] = {}
    gangs: dict[str, tuple[int, float]] = {}
    unfinished = refused = 0
    stop = asyncio.Event()
    client = admin_client(server, connections=size.s10_singles + 2)
    async with client, fleet.following() as done:
        alongside = [
            asyncio.create_task(singles_alongside(client, done, stop, singles))
            for _ in range(size.s10_singles)
        ]
        say(f"{size.s10_gangs} gangs of each of {size.s10_nodes} nodes, one at a time")
        try:
            for _ in range(size.s10_gangs):
                for n in size.s10_nodes:
                    try:
                        job_id, answered = await submit_gang(client, n)
                    except SubmitRefused:
                        refused += 1
                        continue
                    gangs[job_id] = (n, answered)
                    if not await done.wait(job_id, within=60.0):
                        unfinished += 1
        finally:
            stop.set()
            refused += sum(await asyncio.gather(*alongside))
    return singles, gangs, unfinished, refused


async def gang_latency(opts: Options) -> Result:
    """Scenario 10: gangs of each size in turn among one-node jobs on an idle fleet."""
    size = opts.size
    result = Result(
        "10",
        "gang start latency",
        opts.database,
        {
            "workers": size.s10_workers,
            "nodes": list(size.s10_nodes),
            "gangs_per_size": size.s10_gangs,
            "one_node_in_flight": size.s10_singles,
        },
    )
    async with (
        opts.server("s10") as server,
        fleet_of(server, size.s10_workers, opts) as (fleet, startup),
    ):
        result.metrics["startup"] = startup
        await fleet.collect()
        server.mark()
        singles, gangs, unfinished, refused = await mixed(server, fleet, size)
        result.metrics["server_cpu_share"] = round(server.usage().cpu_share, 3)
        seen, _beats = await fleet.collect()
        result.metrics["errors"] = (await fleet.status())["errors"][:10]
    one, by_size, never = latencies(seen, singles, gangs)
    partial = whole_gangs(seen, {j: n for j, (n, _a) in gangs.items()})
    doubles = double_offers(seen)
    result.metrics |= {
        "one_node": ms_summary(one),
        "gangs": {str(n): ms_summary(by_size.get(n, [])) for n in size.s10_nodes},
        "gangs_never_running": never[:10],
        "gangs_unfinished_within_60s": unfinished,
        "partial_gang_offers": partial[:10],
        "double_offers": doubles[:10],
        "refused": refused,
        "gang_reports_refused": sum(1 for s in seen if s.kind == "refused" and s.job_id in gangs),
        "offer_spread": ms_summary(offer_spread(seen, gangs)),
        "phases": phases(seen, gangs),
        "slowest": slowest(seen, gangs),
    }
    judge(result, size.s10_nodes, len(partial), len(doubles), len(never))
    return result


def offer_spread(seen: Iterable[Seen], gangs: Mapping[str, Any]) -> list[float]:
    """Each gang attempt's first offer to its last, as the workers saw them (informative)."""
    times: dict[str, list[float]] = defaultdict(list)
    for s in seen:
        if s.kind == "offer" and s.job_id in gangs:
            times[s.attempt_id].append(s.mono)
    return [max(t) - min(t) for t in times.values()]


PHASES = (
    "answer_to_first_offer",
    "first_to_last_offer",
    "last_offer_to_last_start",
    "last_start_to_running",
)


def phases(
    seen: Iterable[Seen], gangs: Mapping[str, tuple[int, float]]
) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Where each size's time goes, per gang that ran: submit answer → its first node's offer,
    first → last offer (one transaction hands them all over), last offer → last `job_start`
    received (every node acknowledged), → last `running` answered."""
    marks: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in seen:
        if s.job_id in gangs and s.kind in ("offer", "start", "running"):
            marks[s.job_id][s.kind].append(s.mono)
    out: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, m in marks.items():
        n, answered = gangs[job_id]
        if len(m["offer"]) != n or len(m["start"]) != n or len(m["running"]) != n:
            continue  # offered more than once: the totals count it, the phases do not
        offer, start, running = m["offer"], m["start"], m["running"]
        steps = (min(offer) - answered, max(offer) - min(offer), max(start) - max(offer))
        for name, value in zip(PHASES, (*steps, max(running) - max(start)), strict=True):
            out[n][name].append(value)
    return {str(n): {k: ms_summary(v) for k, v in d.items()} for n, d in out.items()}


def judge(result: Result, sizes: Sequence[int], partial: int, doubles: int, never: int) -> None:
    """The table's rows: each size's p50/p99 and its p99 against the one-node p99 (≤ 2), and
    the invariants (0 each)."""
    m = result.metrics
    base = m["one_node"]["p99_ms"]
    result.check("1-node p50 submit → running (ms)", m["one_node"]["p50_ms"], "-", None)
    result.check("1-node p99 (ms)", base, "-", None)
    for n in sizes:
        lat = m["gangs"][str(n)]
        ratio = round(lat["p99_ms"] / base, 2) if lat["p99_ms"] and base else None
        m["gangs"][str(n)]["p99_vs_one_node"] = ratio
        result.check(f"{n} nodes: p50 submit → every node running (ms)", lat["p50_ms"], "-", None)
        result.check(f"{n} nodes: p99 (ms)", lat["p99_ms"], "-", None)
        result.check(f"{n} nodes: p99 / 1-node p99", ratio, f"≤ {GOAL:g}", at_most(ratio, GOAL))
    result.check("gang attempts offered partially", partial, "0", partial == 0)
    result.check("offers to a worker holding a job", doubles, "0", doubles == 0)
    result.check("gangs never running on every node", never, "0", never == 0)
    check_cpu(result)
    check_refused(result, m["refused"])


def slowest(
    seen: Iterable[Seen], gangs: Mapping[str, tuple[int, float]]
) -> dict[str, list[tuple[str, int | None, float]]]:
    """The slowest gang of each size: its workers' notes in order (what, by which worker,
    its rank, ms after the submit's answer), to tell where a tail went (informative)."""
    by_job: dict[str, list[Seen]] = defaultdict(list)
    for s in seen:
        if s.job_id in gangs:
            by_job[s.job_id].append(s)
    worst: dict[int, tuple[float, str]] = {}
    for job_id, notes in by_job.items():
        n, answered = gangs[job_id]
        runs = [s.mono for s in notes if s.kind == "running"]
        if not runs:
            continue
        total = max(runs) - answered
        if n not in worst or total > worst[n][0]:
            worst[n] = (total, job_id)
    out = {}
    for n, (_t, job_id) in worst.items():
        answered = gangs[job_id][1]
        out[str(n)] = [
            (f"{s.kind} {s.worker_id}", s.rank, round((s.mono - answered) * 1000, 1))
            for s in sorted(by_job[job_id], key=lambda s: s.mono)
        ]
    return out
