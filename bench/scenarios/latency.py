"""Scenario 1: dispatch latency, submit answer to the worker's event."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from bench.report import Result, ms_summary
from bench.scenarios.options import Options
from bench.scenarios.steps import (
    SubmitRefused,
    admin_client,
    at_most,
    check_cpu,
    check_refused,
    first,
    fleet_of,
    other_replicas,
    say,
    submit,
    teams_in_turn,
)
from bench.server import BenchServer
from bench.workers import Fleet, Seen


async def latency_run(
    server: BenchServer,
    fleet: Fleet,
    jobs: int,
    budget: float = 600.0,
    paced: bool = False,
    teams: Sequence[str] = (),
) -> dict[str, Any]:
    """Submit `jobs` one at a time, for at most `budget` seconds; submit answer → event.

    Each submit follows the previous answer; `paced`, the previous job's completion (one job
    in the fleet at a time), so that what is timed is the way to an idle worker, not a
    backlog of the workers' reports. `teams`: the submits name these teams in turn."""
    await fleet.collect()  # forget what came before
    submitted: dict[str, tuple[float, float]] = {}
    refused: list[str] = []
    unfinished = 0
    say(
        f"submitting {jobs} jobs one at a time"
        + (", each after the last completed" if paced else "")
    )
    stop_at = time.monotonic() + budget
    team_of_next = teams_in_turn(teams)
    # Only a paced run hears completions: the others leave the workers' pipes quiet.
    follow = fleet.following() if paced else contextlib.nullcontext(None)
    async with admin_client(server) as client, follow as completions:
        for _ in range(jobs):
            if time.monotonic() > stop_at:
                say(f"stopped submitting after {budget:g} s: {len(submitted)} of {jobs} jobs")
                break
            try:
                job_id, sent, answered = await submit(client, team=next(team_of_next))
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
        result.metrics.update(await latency_run(server, fleet, size.s1_jobs))
        result.metrics["server_cpu_share"] = round(server.usage().cpu_share, 3)
        result.metrics.update(other_replicas(server))
        if opts.paced:
            result.metrics["one_in_flight"] = await latency_run(
                server, fleet, size.s1_jobs, paced=True
            )
        result.metrics["errors"] = (await fleet.status())["errors"][:10]
    lat = result.metrics["answer_to_event"]
    result.check("p50 submit answer → event (ms)", lat["p50_ms"], "≤ 2", at_most(lat["p50_ms"], 2))
    result.check("p90 (ms)", lat["p90_ms"], "-", None)
    result.check("p99 (ms)", lat["p99_ms"], "≤ 10", at_most(lat["p99_ms"], 10))
    sent = result.metrics["send_to_event"]
    result.check("p50 submit sent → event (ms)", sent["p50_ms"], "-", None)
    result.check("p99 submit sent → event (ms)", sent["p99_ms"], "-", None)
    check_cpu(result)
    check_refused(result, result.metrics["refused"])
    if opts.paced:
        paced = result.metrics["one_in_flight"]
        lat, sent = paced["answer_to_event"], paced["send_to_event"]
        label = "one job in flight:"
        result.check(
            f"{label} p50 answer → event (ms)", lat["p50_ms"], "≤ 2", at_most(lat["p50_ms"], 2)
        )
        result.check(f"{label} p99 (ms)", lat["p99_ms"], "≤ 10", at_most(lat["p99_ms"], 10))
        result.check(f"{label} p99 sent → event (ms)", sent["p99_ms"], "-", None)
        check_refused(result, paced["refused"])
        if paced["unfinished_within_30s"]:
            result.check(
                "jobs not completed within 30 s", paced["unfinished_within_30s"], "0", False
            )
    return result
