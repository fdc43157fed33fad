"""Which of the instances a pool's provider lists are strays (#36): machines up that no live
launch follows and no live worker runs on, which nothing but this would ever stop (a launch
that failed after its machine came up, a terminate that was lost, a crash). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.domain.pools import LIVE_LAUNCH, Launch
from gpufleet.domain.records import Worker


def strays(
    listed: Iterable[str],
    launches: Mapping[str, Launch],
    workers: Mapping[str, Worker],
    *,
    unnamed: bool,
) -> list[str]:
    """The listed instance ids to terminate. `launches`: the pool's launches that named a
    listed id; `workers`: the fleet by id. With `unnamed` (a live launch of the pool whose
    instance id is not stored yet, as after a crash mid-launch) nothing is judged: any of the
    listed may be its machine."""
    if unnamed:
        return []
    out = []
    for instance in dict.fromkeys(listed):
        launch = launches.get(instance)
        if launch is not None and launch.state in LIVE_LAUNCH:
            continue  # followed: the launch ends it
        worker = workers.get(launch.worker_id or "") if launch is not None else None
        if worker is not None and (not worker.offline or worker.current_attempt_id is not None):
            continue  # its worker is up, or runs a job: never stopped under it
        out.append(instance)
    return out
