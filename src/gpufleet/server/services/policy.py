"""The queue policy (limits, fair share, preemption and approval rules): reading it and
changing it (docs/scheduling.md). The record is `domain.policy`'s; approvals are
services/approvals.py, why a job waits services/waiting.py."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpufleet.domain.levels import Level
from gpufleet.domain.policy import COUNT_FIELDS, POLICY_FIELDS, SWITCH_FIELDS, Policy
from gpufleet.errors import InvalidInput
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import dispatch
from gpufleet.store.queries.policy import policy_of

MAX_LIMIT = 1_000_000


async def get_policy(ctx: Context) -> tuple[Policy, dict[str, Any]]:
    """The policy, and its row (who changed it, when)."""
    async with ctx.store.read() as q:
        row = await q.policy_row()
    return (policy_of(row) if row else Policy()), row


# ---- changing the policy -----------------------------------------------------------------

_SECONDS = {  # each of SECONDS_FIELDS: (least, most)
    "half_life_s": (60.0, 10 * 365 * 86400.0),
    "min_runtime_s": (0.0, 365 * 86400.0),
    "preempt_grace_s": (0.0, 86400.0),
}


def check_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes as they are stored; each refused field says what it takes."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name in COUNT_FIELDS:
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT
            ):
                raise InvalidInput(f"{name} is a count from 0 to {MAX_LIMIT}, or null: no limit")
            out[name] = value
        elif name in SWITCH_FIELDS:
            if not isinstance(value, bool):
                raise InvalidInput(f"{name} is true or false")
            out[name] = value
        elif name in _SECONDS:
            least, most = _SECONDS[name]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not least <= value <= most
            ):
                raise InvalidInput(f"{name} is a number of seconds from {least:g} to {most:g}")
            out[name] = float(value)
        elif name == "approve_levels":
            if not isinstance(value, list | tuple | set | frozenset) or any(
                v not in Level.__members__.values() for v in value
            ):
                allowed = ", ".join(level.value for level in Level)
                raise InvalidInput(f"approve_levels lists levels among: {allowed}")
            out[name] = sorted({str(v) for v in value})
        else:
            raise InvalidInput(
                f"unknown policy field {name!r}; use one of {', '.join(POLICY_FIELDS)}"
            )
    return out


async def set_policy(
    ctx: Context, changes: Mapping[str, Any], actor: str, client: str | None
) -> Policy:
    """Change some of the policy's fields (audited), then dispatch: a limit may have risen."""
    values = check_changes(changes)
    async with transaction(ctx) as tx:
        before = await tx.q.policy_row(lock=True)
        if values:
            await tx.q.update_policy({**values, "updated_at": tx.now, "updated_by": actor})
            old = {k: before.get(k) for k in values}
            tx.audit("queue.policy_changed", actor, "queue_policy", client, old=old, new=values)
        policy = await tx.q.get_policy()
    if values:
        await dispatch.dispatch_all(ctx)
    return policy


def policy_view(policy: Policy) -> dict[str, Any]:
    lim = policy.limits
    return {
        "max_jobs": lim.max_jobs,
        "max_gpus": lim.max_gpus,
        "team_max_jobs": lim.team_max_jobs,
        "team_max_gpus": lim.team_max_gpus,
        "user_max_jobs": lim.user_max_jobs,
        "user_max_gpus": lim.user_max_gpus,
        "user_max_queued": lim.user_max_queued,
        "fair_share": policy.fair_share,
        "half_life_s": policy.half_life_s,
        "preemption": policy.preemption,
        "min_runtime_s": policy.min_runtime_s,
        "preempt_grace_s": policy.preempt_grace_s,
        "approve_gpus_over": policy.approve_gpus_over,
        "approve_levels": sorted(level.value for level in policy.approve_levels),
    }
