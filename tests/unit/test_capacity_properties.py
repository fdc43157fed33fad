"""The pools' decision over random fleets (hypothesis): what must hold whatever the queue,
the workers, the pools and their launches are."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.capacity import FleetWorker, Plan, WaitingJob, decide, shape_of
from gpufleet.domain.matching import Capacity, Feature, Requirement, fits
from gpufleet.domain.pool_limits import backoff_s
from gpufleet.domain.pool_reasons import PoolWhy
from gpufleet.domain.pools import LIVE_LAUNCH, Launch, LaunchState, Pool
from gpufleet.domain.states import Target, WorkerStatus
from tests.unit.test_capacity import T0, failed, job, launch, pool, worker

LABELS = [{"pool": "a"}, {"pool": "b"}, {"pool": "a", "zone": "x"}, {"pool": "a", "zone": "y"}]
WANTS = [{}, {"pool": "a"}, {"pool": "b"}, {"zone": "x"}, {"pool": "c"}]
S = LaunchState


@st.composite
def a_pool(draw: st.DrawFn, i: int) -> Pool:
    least = draw(st.integers(0, 3))
    price = draw(st.sampled_from([0.0, 1.0, 2.5]))
    cost = draw(st.none() | st.floats(least * price, least * price + 12))
    return pool(
        f"p{i}",
        labels=draw(st.sampled_from(LABELS)),
        gpus=draw(st.integers(1, 4)),
        least=least,
        most=draw(st.integers(least, 6)),
        price=price,
        cost=cost,
        enabled=draw(st.booleans()),
        idle=draw(st.sampled_from([0, 60, 300])),
    )


@st.composite
def a_fleet(draw: st.DrawFn) -> dict[str, Any]:
    pools = [draw(a_pool(i)) for i in range(draw(st.integers(1, 3)))]
    launches: list[Launch] = []
    workers: list[FleetWorker] = []
    statuses = st.sampled_from(list(WorkerStatus))
    ago = st.integers(0, 4000).map(lambda s: T0 - timedelta(seconds=s))
    for p in pools:
        for n in range(draw(st.integers(0, 6))):
            state = draw(st.sampled_from(list(S)))
            at = draw(ago)
            up = state in (S.REGISTERED, S.TERMINATING) or (
                state is S.TERMINATED and draw(st.booleans())
            )
            wid = f"w-{p.name}-{n}"
            error = None if up or state is S.LAUNCHING else "exit 1"
            launches.append(
                replace(
                    launch(p, n, state, at=at, registered=at if up else None, error=error),
                    worker_id=wid,
                )
            )
            if state is S.REGISTERED:
                status = draw(statuses)
                spent, soon = draw(st.booleans()), draw(st.booleans())
                made = worker(wid, of=p, status=status, idle_since=draw(ago), spent=spent)
                workers.append(replace(made, free_soon=soon))
    for n in range(draw(st.integers(0, 5))):
        made = worker(
            f"w-other-{n}",
            labels=draw(st.sampled_from(LABELS)),
            gpus=draw(st.integers(1, 4)),
            status=draw(statuses),
        )
        workers.append(made)
    jobs = []
    for n in range(draw(st.integers(0, 8))):
        nodes = draw(st.integers(1, 3))
        same = draw(st.sampled_from([None, "zone", "pool"])) if nodes > 1 else None
        made = job(
            n,
            labels=draw(st.sampled_from(WANTS)),
            gpus=draw(st.integers(0, 4)),
            nodes=nodes,
            same=same,
            target=draw(st.sampled_from([Target.AUTO, Target.AUTO, Target.WORKER, Target.LOCAL])),
        )
        jobs.append(made)
    return {"pools": pools, "jobs": jobs, "workers": workers, "launches": launches}


def _node(j: WaitingJob) -> Requirement:
    if j.shape.nodes == 1:
        return j.requirement
    return replace(j.requirement, needs=j.requirement.needs | {Feature.GANG})


def _runs(j: WaitingJob, cap: Capacity) -> bool:
    same = j.shape.same_label
    return (
        cap.gpu_count is not None and (same is None or same in cap.labels) and fits(_node(j), cap)
    )


def _free_units(fleet: dict[str, Any]) -> dict[str, Capacity]:
    """What takes a job without a launch, as the decision's rules say it in words."""
    free = {
        w.capacity.worker_id: w.capacity
        for w in fleet["workers"]
        if not w.capacity.spent
        and w.capacity.gpu_count is not None
        and (
            w.capacity.status in (WorkerStatus.IDLE, WorkerStatus.CONNECTING)
            or (w.capacity.status is WorkerStatus.BUSY and w.free_soon)
        )
    }
    by_id = {p.id: p for p in fleet["pools"]}
    for x in fleet["launches"]:
        if x.state is S.LAUNCHING and x.worker_id not in free:
            free[f"launch:{x.id}"] = shape_of(by_id[x.pool_id], f"launch:{x.id}")
    return free


def _plan(fleet: dict[str, Any]) -> Plan:
    return decide(fleet["pools"], fleet["jobs"], fleet["workers"], fleet["launches"], T0)


def _live(fleet: dict[str, Any], p: Pool, states: frozenset[LaunchState] = LIVE_LAUNCH) -> int:
    return sum(1 for x in fleet["launches"] if x.pool_id == p.id and x.state in states)


@settings(max_examples=150, deadline=None)
@given(a_fleet())
def test_no_pool_goes_above_its_max_or_its_cost_counting_launches_in_flight(fleet: dict) -> None:
    plan = _plan(fleet)
    for p in fleet["pools"]:
        planned = plan.pools[p.name]
        assert planned.live == _live(fleet, p)
        if planned.launch:
            assert p.enabled and planned.reason.code is PoolWhy.LAUNCHING
            assert planned.live + planned.launch <= p.max_workers
            if p.max_cost_per_hour is not None:
                cost = (planned.live + planned.launch) * p.price_per_hour
                assert cost <= p.max_cost_per_hour + 1e-6


@settings(max_examples=150, deadline=None)
@given(a_fleet())
def test_no_launch_is_for_a_job_a_free_worker_or_launch_in_flight_takes(fleet: dict) -> None:
    plan = _plan(fleet)
    free = _free_units(fleet)
    jobs = {j.job_id: j for j in fleet["jobs"]}
    used = [unit for units in plan.taken.values() for unit in units]
    assert len(used) == len(set(used)), "a worker taken by two jobs"
    for job_id, units in plan.taken.items():
        assert all(u in free and _runs(jobs[job_id], free[u]) for u in units)
    left = {u: cap for u, cap in free.items() if u not in used}
    for job_id in plan.launching_for:
        j = jobs[job_id]
        fitting = Counter(
            cap.labels.get(j.shape.same_label, "") if j.shape.same_label else ""
            for cap in left.values()
            if _runs(j, cap)
        )
        assert max(fitting.values(), default=0) < j.shape.nodes, (job_id, fitting)
    for name, planned in plan.pools.items():
        mine = [jobs[i] for i, at in plan.launching_for.items() if at == name]
        p = next(p for p in fleet["pools"] if p.name == name)
        deficit = max(0, p.min_workers - _live(fleet, p, frozenset({S.LAUNCHING, S.REGISTERED})))
        assert planned.launch <= sum(j.shape.nodes for j in mine) + deficit


@settings(max_examples=150, deadline=None)
@given(a_fleet())
def test_only_a_pools_idle_workers_no_job_takes_are_retired_never_below_min(fleet: dict) -> None:
    plan = _plan(fleet)
    taken = {unit for units in plan.taken.values() for unit in units}
    for p in fleet["pools"]:
        planned = plan.pools[p.name]
        retired = set(planned.retire)
        assert len(retired) == len(planned.retire)
        for w in fleet["workers"]:
            if w.capacity.worker_id in retired:
                assert w.pool_id == p.id and w.capacity.status is WorkerStatus.IDLE
                assert not w.capacity.spent and w.capacity.worker_id not in taken
        standing = _live(fleet, p, frozenset({S.LAUNCHING, S.REGISTERED}))
        floor = p.min_workers if p.enabled else 0
        after = standing + planned.launch - len(retired)
        assert after >= min(floor, standing + planned.launch)


@settings(max_examples=150, deadline=None)
@given(st.lists(a_pool(0), min_size=1, max_size=1), st.integers(0, 9), st.integers(0, 4))
def test_with_nothing_waiting_a_pool_comes_to_its_min_workers(
    pools: list[Pool], up: int, busy: int
) -> None:
    p = pools[0]
    launches: list[Launch] = []
    workers: dict[str, FleetWorker] = {}
    now = T0

    def start(n: int) -> None:
        wid = f"w{len(launches)}"
        launches.append(
            replace(launch(p, len(launches), S.REGISTERED, registered=now), worker_id=wid)
        )
        workers[wid] = worker(wid, of=p, idle_since=now)

    for _ in range(up):
        start(0)
    for wid in list(workers)[:busy]:  # busy at first, idle from the second round
        workers[wid] = replace(
            workers[wid], capacity=replace(workers[wid].capacity, status=WorkerStatus.BUSY)
        )
    for _ in range(6):
        plan = decide([p], [], list(workers.values()), launches, now).pools[p.name]
        for wid in plan.retire:
            del workers[wid]
            i = next(i for i, x in enumerate(launches) if x.worker_id == wid)
            launches[i] = replace(launches[i], state=S.TERMINATED, ended_at=now)
        for _ in range(plan.launch):
            start(0)
        now += timedelta(hours=1)
        for wid, w in workers.items():  # a busy worker's job ends within the hour
            if w.capacity.status is WorkerStatus.BUSY:
                workers[wid] = FleetWorker(replace(w.capacity, status=WorkerStatus.IDLE), p.id, now)
    assert len(workers) == (p.min_workers if p.enabled else 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10_000))
def test_after_failures_a_pool_waits_their_backoff_from_the_last_one(n: int, gap: int) -> None:
    burst = pool()
    last = T0 + timedelta(seconds=gap)
    history = [failed(burst, i, T0 + timedelta(seconds=i * gap / n)) for i in range(n - 1)]
    history.append(failed(burst, n, last))
    wait = timedelta(seconds=backoff_s(n))
    before = decide([burst], [job(1)], [], history, last + wait - timedelta(seconds=1))
    assert before.pools["burst"].launch == 0
    assert before.pools["burst"].reason.code is PoolWhy.BACKING_OFF
    assert decide([burst], [job(1)], [], history, last + wait).pools["burst"].launch == 1


@settings(max_examples=150, deadline=None)
@given(a_fleet())
def test_every_job_a_pool_is_for_is_told_what_that_pool_does_for_it(fleet: dict) -> None:
    """A job launched for, or held back by its pool, is told so, naming that pool; a job taken
    by launches in flight is told it waits for one; no other job is told of a pool."""
    plan = _plan(fleet)
    for job_id, name in [*plan.launching_for.items(), *plan.held_back.items()]:
        assert plan.waits[job_id].params["pool"] == name
    for job_id in plan.launching_for:
        assert plan.waits[job_id].code is PoolWhy.LAUNCHING
    for job_id, reason in plan.waits.items():
        if job_id not in plan.launching_for and job_id not in plan.held_back:
            assert reason.code is PoolWhy.LAUNCHING
            assert any(u.startswith("launch:") for u in plan.taken[job_id])
