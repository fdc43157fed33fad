"""Which of the instances a pool's provider lists are strays (#36): machines up that no live
launch follows and no live worker runs on, which nothing but this would ever stop (a launch
that failed after its machine came up, a terminate that was lost, a crash). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpufleet.domain.pools import LIVE_LAUNCH, Launch
from gpufleet.domain.records import Worker


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
