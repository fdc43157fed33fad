"""What a crash leaves of a pool's launches (#36), pure.

Orphans: `launching` rows with no instance id whose provider call nobody awaits any more (the
orchestrator died, or lost its lead, between recording the launch and storing the answer):
their answer is lost, so they are ended at once instead of holding their job and the pool's
room for `launch_timeout_s`. Strays: machines a pool's provider lists that no live launch
follows and no live worker runs on, which nothing but this would ever stop (an orphan's
machine, a launch that failed after its machine came up, a terminate that was lost)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from gpufleet.domain.pools import LIVE_LAUNCH, Launch, LaunchState
from gpufleet.domain.records import Worker

# An orphan's error; not a failure of its provider, so the pool's backoff does not count it.
INTERRUPTED = (
    "the orchestrator restarted (or another replica took the lead) during this launch: "
    "the provider's answer was lost; a machine it started is terminated as a stray"
)


def orphaned(launch: Launch, now: datetime, *, alone: bool, call_bound_s: float) -> bool:
    """Whether a launch's provider call is over with its answer unrecorded: `launching`, no
    instance id, and either no other replica could still be calling (`alone`: SQLite's one
    process, or the only replica linked; this one's passes never overlap) or the call is past
    `call_bound_s`, by which any replica calling gives up and records a failure."""
    if launch.state is not LaunchState.LAUNCHING or launch.instance_id is not None:
        return False
    return alone or (now - launch.created_at).total_seconds() > call_bound_s


def interrupted(launch: Launch) -> bool:
    """An orphan ended: neither a failure nor a success for the backoff."""
    return launch.error == INTERRUPTED


def strays(
    listed: Iterable[str],
    launches: Sequence[Launch],
    workers: Mapping[str, Worker],
    *,
    unnamed: bool,
) -> list[str]:
    """The listed instance ids to terminate. `launches`: those (of any pool: a provider may
    list more than its pool's) that named a listed id; `workers`: the fleet by id. With
    `unnamed` (a live launch whose instance id is not stored yet, as after a crash
    mid-launch) nothing is judged: any of the listed may be its machine."""
    if unnamed:
        return []
    spared = {x.instance_id for x in launches if _accounted(x, workers)}
    return [i for i in dict.fromkeys(listed) if i not in spared]


def _accounted(launch: Launch, workers: Mapping[str, Worker]) -> bool:
    """A launch that answers for its instance: live (it ends it), or its worker up or
    running a job (never stopped under it)."""
    if launch.state in LIVE_LAUNCH:
        return True
    worker = workers.get(launch.worker_id or "")
    return worker is not None and (not worker.offline or worker.current_attempt_id is not None)
