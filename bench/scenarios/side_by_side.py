"""Scenario 6: scenarios 1 and 2 on one PostgreSQL orchestrator, then on two replicas."""

from __future__ import annotations

from dataclasses import replace

from bench.report import Result
from bench.scenarios.latency import dispatch_latency
from bench.scenarios.options import Options
from bench.scenarios.steps import PG_DEFAULT
from bench.scenarios.throughput import throughput


async def side_by_side(opts: Options) -> list[Result]:
    """Scenario 6: scenarios 1 and 2 on PostgreSQL, on one orchestrator then on two replicas
    (submits to one, workers streaming from the other: every offer crosses replicas)."""
    results: list[Result] = []
    url = opts.database_url or PG_DEFAULT
    for replicas, prefix in ((1, "6"), (2, "6/r")):
        pg = replace(opts, database_url=url, replicas=replicas, paced=True)
        for run in (dispatch_latency, throughput):
            r = await run(pg)
            r.scenario = f"{prefix}/{r.scenario}" if replicas > 1 else f"6/{r.scenario}"
            results.append(r)
    compare_replicas(results)
    return results


def compare_replicas(results: list[Result]) -> None:
    """#19's goal 2 on the two-replica rows: server CPU a job summed over both replicas
    (6/r/2) <= 1.2x one replica's (6/2); answer -> event p99 with one job in flight, every offer
    crossing replicas (6/r/1), <= 2x one replica's (6/1). Submit sent -> event: answer -> event
    goes negative when the offer's NOTIFY beats the submit's answer, and a ratio of it says
    nothing."""
    by = {r.scenario: r.metrics for r in results}
    one, two = by.get("6/2", {}), by.get("6/r/2", {})
    cpu = _ratio(two.get("server_cpu_per_job_ms"), one.get("server_cpu_per_job_ms"))
    rows = {r.scenario: r for r in results}
    if "6/r/2" in rows:
        rows["6/r/2"].metrics["cpu_per_job_vs_one_replica"] = cpu
        ok = None if cpu is None else cpu <= 1.2
        rows["6/r/2"].check("server CPU a job, two replicas / one (6/2)", cpu, "≤ 1.2", ok)
    one_p99 = by.get("6/1", {}).get("one_in_flight", {}).get("send_to_event", {}).get("p99_ms")
    two_p99 = by.get("6/r/1", {}).get("one_in_flight", {}).get("send_to_event", {}).get("p99_ms")
    p99 = _ratio(two_p99, one_p99)
    if "6/r/1" in rows:
        rows["6/r/1"].metrics["p99_vs_one_replica"] = p99
        ok = None if p99 is None else p99 <= 2
        rows["6/r/1"].check(
            "one job in flight: p99 sent → event, two replicas / one (6/1)", p99, "≤ 2", ok
        )


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else round(a / b, 2)
