"""The pools' decision (`domain/capacity.py`): what each pool launches and retires, and why.

Examples first, then properties over random fleets (hypothesis): never above max, never a
launch for a job a free worker takes, converging to `min_workers` when nothing waits, and a
backoff that grows and caps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.capacity import FleetWorker, WaitingJob, decide
from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.matching import AGENT_FEATURES, Capacity, Feature, Requirement
from gpufleet.domain.pool_limits import FIRST_BACKOFF_S, MAX_BACKOFF_S, backoff_s
from gpufleet.domain.pool_reasons import PoolWhy
from gpufleet.domain.pool_strays import INTERRUPTED
from gpufleet.domain.pools import Launch, LaunchState, LocalProvider, Pool
from gpufleet.domain.states import Target, WorkerStatus, WorkerType

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GANG = frozenset(AGENT_FEATURES)


def pool(
    name: str = "burst",
    *,
    labels: Mapping[str, str] | None = None,
    gpus: int = 1,
    least: int = 0,
    most: int = 4,
    price: float = 1.0,
    cost: float | None = None,
    enabled: bool = True,
    idle: int = 300,
    worker_type: WorkerType = WorkerType.EPHEMERAL,
) -> Pool:
    return Pool(
        id=f"id-{name}",
        name=name,
        provider=LocalProvider(),
        labels=dict(labels if labels is not None else {"pool": name}),
        gpu_count=gpus,
        gpu_name=None,
        worker_type=worker_type,
        min_workers=least,
        max_workers=most,
        idle_timeout_s=idle,
        launch_timeout_s=600,
        price_per_hour=price,
        max_cost_per_hour=cost,
        enabled=enabled,
        created_at=T0,
        created_by=None,
        updated_at=T0,
    )


def job(
    i: int,
    *,
    labels: Mapping[str, str] | None = None,
    gpus: int = 1,
    nodes: int = 1,
    same: str | None = None,
    target: Target = Target.AUTO,
) -> WaitingJob:
    req = Requirement(target, gpus, dict(labels if labels is not None else {"pool": "burst"}))
    req = replace(req, needs=frozenset({Feature.COMMAND}))
    return WaitingJob(f"j{i:04}", req, GangShape(nodes, gpus, same if nodes > 1 else None))


def worker(
    wid: str,
    *,
    labels: Mapping[str, str] | None = None,
    gpus: int = 1,
    status: WorkerStatus = WorkerStatus.IDLE,
    of: Pool | None = None,
    idle_since: datetime | None = None,
    spent: bool = False,
    free_soon: bool = False,
) -> FleetWorker:
    shown = dict(labels if labels is not None else (of.labels if of else {}))
    cap = Capacity(wid, wid, status, gpus, shown, False, spent=spent, features=GANG)
    return FleetWorker(cap, of.id if of else None, idle_since, free_soon)


def launch(
    of: Pool,
    i: int,
    state: LaunchState = LaunchState.LAUNCHING,
    *,
    at: datetime = T0,
    registered: datetime | None = None,
    ended: datetime | None = None,
    error: str | None = None,
    stderr: str | None = None,
    worker_id: str | None = None,
) -> Launch:
    return Launch(
        f"l{of.name}{i:03}", of.id, state, None, worker_id, at, registered, ended, stderr, error
    )


def failed(of: Pool, i: int, at: datetime, stderr: str = "quota exceeded") -> Launch:
    return launch(of, i, LaunchState.FAILED, at=at, ended=at, error="exit 1", stderr=stderr)


# ---- examples ---------------------------------------------------------------------------------


def test_an_empty_fleet_launches_for_its_waiting_jobs_up_to_the_max() -> None:
    burst = pool(most=2)
    plan = decide([burst], [job(1), job(2), job(3)], [], [], T0)
    assert plan.pools["burst"].launch == 2
    assert str(plan.pools["burst"].reason) == "launching 2 workers in pool burst (2 of max 2)"
    assert plan.launching_for == {"j0001": "burst", "j0002": "burst"}
    assert plan.held_back == {"j0003": "burst"}


def test_a_job_an_idle_or_launching_worker_will_take_launches_nothing() -> None:
    burst = pool()
    idle = worker("w1", of=burst)
    plan = decide([burst], [job(1), job(2)], [idle], [launch(burst, 1)], T0)
    assert plan.pools["burst"].launch == 0
    assert plan.taken == {"j0001": ("w1",), "j0002": ("launch:lburst001",)}
    assert plan.pools["burst"].reason.code is PoolWhy.STEADY


def test_a_busy_worker_takes_nothing_unless_it_frees_soon() -> None:
    burst = pool()
    busy = worker("w1", of=burst, status=WorkerStatus.BUSY)
    assert decide([burst], [job(1)], [busy], [], T0).pools["burst"].launch == 1
    soon = replace(busy, free_soon=True)
    assert decide([burst], [job(1)], [soon], [], T0).pools["burst"].launch == 0


def test_a_launch_whose_worker_registered_is_counted_once() -> None:
    burst = pool()
    mine = launch(burst, 1, worker_id="w1")
    registered = worker("w1", of=burst, status=WorkerStatus.CONNECTING)
    plan = decide([burst], [job(1), job(2)], [registered], [mine], T0)
    assert plan.taken == {"j0001": ("w1",)} and plan.pools["burst"].launch == 1


def test_a_gang_launches_the_nodes_it_lacks_beside_an_idle_one_with_its_label() -> None:
    zone = pool("zone-a", labels={"zone": "a"}, most=4)
    jobs = [job(1, labels={}, nodes=3, same="zone")]
    idle = [worker("w1", labels={"zone": "a"}), worker("w2", labels={"zone": "b"})]
    plan = decide([zone], jobs, idle, [], T0)
    assert plan.taken == {"j0001": ("w1",)}
    assert plan.pools["zone-a"].launch == 2


def test_a_gang_bigger_than_the_max_launches_nothing_and_says_so() -> None:
    burst = pool(most=4)
    plan = decide([burst], [job(1, nodes=5)], [], [], T0)
    assert plan.pools["burst"].launch == 0
    assert str(plan.pools["burst"].reason) == (
        "job j0001 needs 5 workers of pool burst at once, over its max of 4"
    )


def test_a_gang_is_launched_whole_or_not_at_all() -> None:
    burst = pool(most=4)
    plan = decide([burst], [job(1), job(2, nodes=4)], [], [launch(burst, 1)], T0)
    assert plan.pools["burst"].launch == 0  # one in flight for j1: room for 3, not 4
    assert str(plan.pools["burst"].reason) == (
        "pool burst has room for 3 workers more of its max 4; job j0002 needs 4 at once"
    )


def test_the_cheapest_pool_that_fits_launches_and_the_next_when_it_is_full() -> None:
    cheap = pool("cheap", labels={"pool": "burst"}, price=1.0, most=1)
    dear = pool("dear", labels={"pool": "burst"}, price=3.0, most=5)
    plan = decide([dear, cheap], [job(1), job(2)], [], [], T0)
    assert plan.launching_for == {"j0001": "cheap", "j0002": "dear"}


def test_jobs_no_pool_could_run_are_left_alone() -> None:
    burst = pool(gpus=1)
    jobs = [job(1, gpus=2), job(2, labels={"pool": "other"}), job(3, target=Target.LOCAL)]
    plan = decide([burst], jobs, [], [], T0)
    assert plan.pools["burst"].launch == 0 and not plan.launching_for and not plan.held_back
    assert str(plan.pools["burst"].reason) == (
        "pool burst needs no new worker (0 up or launching, min 0, max 4)"
    )


def test_a_disabled_pool_launches_nothing_and_says_it_is_disabled() -> None:
    plan = decide([pool(enabled=False, least=2)], [job(1)], [], [], T0)
    assert plan.pools["burst"].launch == 0
    assert str(plan.pools["burst"].reason) == "pool burst is disabled"


def test_the_cost_limit_stops_launches_with_its_reason() -> None:
    burst = pool(price=2.0, cost=5.0, most=10)
    plan = decide([burst], [job(1), job(2), job(3)], [], [launch(burst, 1)], T0)
    assert plan.pools["burst"].launch == 1
    busy = [launch(burst, i, LaunchState.REGISTERED, registered=T0) for i in range(2)]
    plan = decide([burst], [job(1)], [], busy, T0)
    assert str(plan.pools["burst"].reason) == (
        "pool burst would cost $6/h with 1 worker more, above its max_cost_per_hour $5 "
        "(2 workers up or launching at $2/h)"
    )


def test_failed_launches_back_off_quoting_the_providers_stderr() -> None:
    burst = pool()
    history = [failed(burst, i, T0 + timedelta(seconds=i)) for i in range(3)]
    soon = T0 + timedelta(seconds=12)
    plan = decide([burst], [job(1)], [], history, soon)
    assert plan.pools["burst"].launch == 0
    assert str(plan.pools["burst"].reason) == (
        "the last 3 launches in pool burst failed: quota exceeded; the next try in 110 s"
    )
    later = T0 + timedelta(seconds=2 + backoff_s(3))
    assert decide([burst], [job(1)], [], history, later).pools["burst"].launch == 1


def test_a_launch_cut_off_by_a_crash_is_no_failure_of_its_provider() -> None:
    burst = pool()
    cut = launch(burst, 5, LaunchState.TERMINATED, at=T0, ended=T0, error=INTERRUPTED)
    assert decide([burst], [job(1)], [], [cut], T0).pools["burst"].launch == 1
    history = [failed(burst, 1, T0), cut]  # counted neither way: one failure, 30 s
    assert (
        decide([burst], [job(1)], [], history, T0 + timedelta(seconds=29)).pools["burst"].launch
        == 0
    )
    assert (
        decide([burst], [job(1)], [], history, T0 + timedelta(seconds=31)).pools["burst"].launch
        == 1
    )


def test_a_launch_that_registered_ends_the_run_of_failures() -> None:
    burst = pool()
    ok = launch(burst, 5, LaunchState.TERMINATED, at=T0 + timedelta(seconds=5), registered=T0)
    history = [failed(burst, i, T0) for i in range(4)] + [ok]
    assert (
        decide([burst], [job(1)], [], history, T0 + timedelta(seconds=6)).pools["burst"].launch == 1
    )


def test_min_workers_are_launched_with_nothing_waiting() -> None:
    plan = decide([pool(least=2)], [], [], [], T0)
    assert plan.pools["burst"].launch == 2


def test_idle_workers_above_min_are_retired_the_longest_idle_first_never_a_busy_one() -> None:
    burst = pool(least=1, idle=300, worker_type=WorkerType.PERSISTENT)
    workers = [
        worker("w1", of=burst, idle_since=T0),
        worker("w2", of=burst, idle_since=T0 + timedelta(seconds=10)),
        worker("w3", of=burst, idle_since=T0 + timedelta(seconds=20)),
        worker("w4", of=burst, status=WorkerStatus.BUSY),
        worker("w5", idle_since=T0),  # not the pool's
    ]
    live = [launch(burst, i, LaunchState.REGISTERED, registered=T0) for i in range(4)]
    plan = decide([burst], [], workers, live, T0 + timedelta(seconds=315))
    assert plan.pools["burst"].retire == ("w1", "w2")
    assert str(plan.pools["burst"].reason) == (
        "retiring 2 workers of pool burst (idle over 5 min, above its min of 1)"
    )


def test_a_pool_above_its_lowered_max_retires_idle_workers_at_once() -> None:
    burst = pool(most=1)
    workers = [worker(f"w{i}", of=burst, idle_since=T0) for i in range(3)]
    live = [launch(burst, i, LaunchState.REGISTERED, registered=T0) for i in range(3)]
    plan = decide([burst], [], workers, live, T0 + timedelta(seconds=1))
    assert len(plan.pools["burst"].retire) == 2


def test_the_reason_says_how_long_ago_the_last_launch_was() -> None:
    burst = pool(most=4)
    live = [launch(burst, 1)]
    plan = decide([burst], [job(1), job(2)], [], live, T0 + timedelta(seconds=40))
    assert str(plan.pools["burst"].reason) == (
        "launching a worker in pool burst (2 of max 4; the last launch 40 s ago)"
    )


def test_the_backoff_doubles_from_its_first_wait_up_to_its_cap() -> None:
    assert [backoff_s(n) for n in range(5)] == [0.0, 30.0, 60.0, 120.0, 240.0]
    assert backoff_s(10**9) == MAX_BACKOFF_S


@given(st.integers(min_value=-3, max_value=10**6), st.integers(min_value=0, max_value=50))
def test_the_backoff_grows_with_each_failure_and_never_passes_its_cap(n: int, more: int) -> None:
    assert backoff_s(n) <= backoff_s(n + more) <= MAX_BACKOFF_S
    assert backoff_s(n) >= (FIRST_BACKOFF_S if n >= 1 else 0.0)


def test_each_waiting_job_is_told_what_its_pool_does_for_it() -> None:
    burst = pool(most=4)
    # One launch in flight, 40 s old: the first job waits for it; the second is launched for;
    # the third and fourth are over the max.
    in_flight = launch(burst, 1, at=T0 - timedelta(seconds=40))
    ones = [job(1), job(2), job(3)]
    plan = decide([burst], [*ones, job(4, nodes=3, gpus=1, same="pool")], [], [in_flight], T0)
    said = {job_id: str(reason) for job_id, reason in plan.waits.items()}
    assert (
        said["j0001"] == "launching a worker in pool burst (1 of max 4; the last launch 40 s ago)"
    )
    assert said["j0002"] == (
        "launching a worker in pool burst (2 of max 4; the last launch 40 s ago)"
    )
    assert said["j0004"] == (
        "pool burst has room for 1 worker more of its max 4; job j0004 needs 3 at once"
    )
    full = [launch(burst, i, LaunchState.REGISTERED, registered=T0) for i in range(4)]
    plan = decide([burst], [job(1)], [], full, T0)
    assert str(plan.waits["j0001"]) == "pool burst is at its max of 4"


def test_a_job_held_by_failures_is_told_the_providers_stderr() -> None:
    burst = pool()
    history = [failed(burst, i, T0, stderr=f"try {i}\nquota exceeded") for i in range(3)]
    plan = decide([burst], [job(1)], [], history, T0 + timedelta(seconds=10))
    assert str(plan.waits["j0001"]) == (
        "the last 3 launches in pool burst failed: quota exceeded; the next try in 110 s"
    )
