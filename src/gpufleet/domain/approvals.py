"""Which submitted jobs wait for a lead's or an admin's approval (docs/scheduling.md). Pure."""

from __future__ import annotations

from gpufleet.domain.levels import Level as Level
from gpufleet.domain.limits import count_of
from gpufleet.domain.policy import Policy


def approval_needed(policy: Policy, level: Level, gpus: int) -> str | None:
    """Why a submitted job waits for a lead's or an admin's approval, or None. The GPU rule
    spares admins: they may change the rule itself."""
    by_whom = "need a lead's or an admin's approval"
    if level in policy.approve_levels:
        return f"{level}s' jobs {by_whom}"
    over = policy.approve_gpus_over
    if over is not None and gpus > over and level is not Level.ADMIN:
        return f"jobs asking more than {count_of(over, 'GPU')} {by_whom}"
    return None
