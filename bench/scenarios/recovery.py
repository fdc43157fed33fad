"""Scenario 5: recovery, a tenth of the busy workers killed."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime
from typing import Any

import httpx

from bench.report import Result, ms_summary
from bench.scenarios.options import Options
from bench.scenarios.steps import admin_client, fleet_of, submit
from bench.server import BenchServer
from bench.workers import HOLD, Fleet, Seen


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
