"""The scenarios: each starts its own server, runs its fleet, and returns a Result (or, for
scenarios 6 and 7, several; scenario 12 runs in process, with no server). One module a
scenario; `steps` holds what they share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.report import Result
from bench.scenarios.artifacts import artifact_transfer
from bench.scenarios.capacity import capacity
from bench.scenarios.depth import queue_depth
from bench.scenarios.gangs import gang_latency
from bench.scenarios.latency import dispatch_latency
from bench.scenarios.options import FULL, MEDIUM, SIZES, SMOKE, Options, ServerPool, Size
from bench.scenarios.policy import policy_cost
from bench.scenarios.pool_decision import pool_decision
from bench.scenarios.pool_launch import pool_launch
from bench.scenarios.recovery import recovery
from bench.scenarios.side_by_side import side_by_side
from bench.scenarios.throughput import throughput
from bench.scenarios.workdir import workdir_scenario

Scenario = Callable[[Options], Awaitable[Result | list[Result]]]

SCENARIOS: dict[int, Scenario] = {
    1: dispatch_latency,
    2: throughput,
    3: capacity,
    4: queue_depth,
    5: recovery,
    6: side_by_side,
    7: artifact_transfer,
    8: policy_cost,
    9: workdir_scenario,
    10: gang_latency,
    11: pool_launch,
    12: pool_decision,
}

__all__ = [
    "FULL",
    "MEDIUM",
    "SCENARIOS",
    "SIZES",
    "SMOKE",
    "Options",
    "Scenario",
    "ServerPool",
    "Size",
]
