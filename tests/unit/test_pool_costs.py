"""What the pools cost (`domain/pool_costs.py`): worker-hours at the pool's price, and the
jobs', users' and teams' shares of them by running time."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.domain.pool_costs import Run, costs
from gpufleet.domain.pools import LaunchState
from tests.unit.test_capacity import T0, launch, pool

H = timedelta(hours=1)


def test_a_pool_costs_its_workers_hours_at_its_price_and_its_jobs_their_running_time() -> None:
    burst = pool(price=2.5)
    ended = launch(
        burst, 1, LaunchState.TERMINATED, registered=T0, ended=T0 + 2 * H, worker_id="w1"
    )
    up = launch(burst, 2, LaunchState.REGISTERED, registered=T0 + H, worker_id="w2")
    never = launch(burst, 3, LaunchState.FAILED, ended=T0, error="exit 1", worker_id="w3")
    runs = [
        Run("j1", "alice", "nlp", "w1", T0 + 0.5 * H, T0 + 1.5 * H),
        Run("j2", "bob", "vision", "w2", T0 + 2 * H, None),  # runs still
        Run("j3", "bob", None, "w-not-a-pools", T0, T0 + H),
    ]
    found = costs([burst], [ended, up, never], runs, T0 + 3 * H)
    c = found.pools[burst.id]
    assert (c.worker_hours, c.to_date, c.per_hour) == (4.0, 10.0, 2.5)  # 2 h + 2 h; 1 up
    assert c.job_hours == 2.0 and c.idle == 5.0
    assert found.jobs == {"j1": 2.5, "j2": 2.5}
    assert found.users == {"alice": 2.5, "bob": 2.5}
    assert found.teams == {"nlp": 2.5, "vision": 2.5}
    assert (found.per_hour, found.to_date) == (2.5, 10.0)


def test_a_run_is_counted_within_its_workers_launch_only() -> None:
    burst = pool(price=1.0)
    ended = launch(burst, 1, LaunchState.TERMINATED, registered=T0, ended=T0 + H, worker_id="w1")
    # The attempt's end came after the instance was gone (reported late): the launch's end holds.
    found = costs([burst], [ended], [Run("j1", None, None, "w1", T0, T0 + 5 * H)], T0 + 6 * H)
    assert found.jobs == {"j1": 1.0} and found.pools[burst.id].idle == 0.0
