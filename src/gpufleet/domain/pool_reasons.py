"""What a pool does now and why, in words: the reasons of `domain/capacity.py`'s plan, which
"why is my job waiting?" shows beside the job a pool launches for."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class PoolWhy(StrEnum):
    LAUNCHING = "launching"
    DISABLED = "disabled"
    BACKING_OFF = "backing_off"
    AT_MAX = "at_max"
    AT_COST = "at_cost"
    GANG_TOO_BIG = "gang_too_big"
    RETIRING = "retiring"
    STEADY = "steady"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0, math.ceil(seconds))} s"
    if seconds < 7200:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _money(amount: float) -> str:
    """An amount in the pools' currency, as prices are written: `$` and two decimals at most."""
    return f"${amount:,.2f}".replace(".00", "")


def _workers(n: int) -> str:
    return f"{n} worker{'' if n == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class PoolReason:
    """What a pool does now and why, as a code and its parameters; `str()` in words."""

    code: PoolWhy
    params: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        p = self.params
        pool = f"pool {p['pool']}"
        match self.code:
            case PoolWhy.LAUNCHING:
                ago = p.get("last_launch_ago_s")
                last = "" if ago is None else f"; the last launch {_duration(ago)} ago"
                return (
                    f"launching {_workers(p['launching']).replace('1 worker', 'a worker')} in "
                    f"{pool} ({p['count']} of max {p['max']}{last})"
                )
            case PoolWhy.DISABLED:
                return f"{pool} is disabled"
            case PoolWhy.BACKING_OFF:
                n = p["failures"]
                what = "the last launch" if n == 1 else f"the last {n} launches"
                return (
                    f"{what} in {pool} failed: {p['excerpt']}; the next try in "
                    f"{_duration(p['next_in_s'])}"
                )
            case PoolWhy.AT_MAX:
                if not p["room"]:
                    return f"{pool} is at its max of {p['max']}"
                return (
                    f"{pool} has room for {_workers(p['room'])} more of its max {p['max']}; "
                    f"job {p['job_id']} needs {p['needed']} at once"
                )
            case PoolWhy.AT_COST:
                needed, price = p.get("needed", 1), p["price"]
                would = (p["count"] + needed) * price
                return (
                    f"{pool} would cost {_money(would)}/h with {_workers(needed)} more, above "
                    f"its max_cost_per_hour {_money(p['max_cost'])} ({_workers(p['count'])} "
                    f"up or launching at {_money(price)}/h)"
                )
            case PoolWhy.GANG_TOO_BIG:
                return (
                    f"job {p['job_id']} needs {p['needed']} workers of {pool} at once, over "
                    f"its max of {p['max']}"
                )
            case PoolWhy.RETIRING:
                return (
                    f"retiring {_workers(p['retiring'])} of {pool} (idle over "
                    f"{_duration(p['idle_timeout_s'])}, above its min of {p['min']})"
                )
            case PoolWhy.STEADY:
                return (
                    f"{pool} needs no new worker ({p['count']} up or launching, min {p['min']}, "
                    f"max {p['max']})"
                )
