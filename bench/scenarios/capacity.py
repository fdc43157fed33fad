"""Scenario 3: capacity, many streaming workers heartbeating slowly, then fast."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.report import Result, ms_summary
from bench.scenarios.options import Options
from bench.scenarios.steps import at_most, fleet_of, say
from bench.server import BenchServer
from bench.workers import Fleet


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
        at_most(s["heartbeats"]["p99_ms"], 50),
    )
    result.check(f"heartbeat p99 at {fast:g} s (ms)", f["heartbeats"]["p99_ms"], "-", None)
    result.check(
        "server CPU share, slow / fast",
        f"{s['server_cpu_share']:.0%} / {f['server_cpu_share']:.0%}",
        "-",
        None,
    )
    result.check(  # #19 goal 3
        f"server CPU at rest ({slow:g} s heartbeats), % of one core",
        s["server_cpu_one_core_pct"],
        "≤ 20",
        s["server_cpu_one_core_pct"] <= 20,
    )
    result.check(
        f"server CPU a heartbeat at {slow:g} s, its stream's pings included (ms)",
        s["server_cpu_per_heartbeat_ms"],
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
        "server_cpu_one_core_pct": round(100 * usage.cpu_seconds / usage.wall_seconds, 1),
        "server_cpu_per_heartbeat_ms": round(1000 * usage.cpu_seconds / len(lat), 3)
        if lat
        else None,
        "server_rss_mib": round(usage.rss_bytes / 2**20, 1),
    }
