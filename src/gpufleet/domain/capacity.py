"""How many workers each pool launches, and which it retires: the decision, pure (#36).

`decide` reads the waiting jobs in queue order, the fleet's workers, the pools and their
launches, and returns a `Plan`: per pool, how many workers to launch, which to retire, and
why, in words ("why is my job waiting?" names the pool).

- **Demand.** A waiting job is matched, as dispatch would match it (`domain/matching.py`),
  against what will take it without a launch: idle workers, registered workers opening their
  stream, busy workers marked `free_soon`, and the launches in flight (each counts as a
  worker of its pool's shape). A gang of N nodes needs N of them, with one value of its
  `same_label`. Jobs take them in queue order; a job they cover is left alone.
- **Launches.** A job nothing covers goes to the cheapest enabled pool whose workers could
  run it (price, then fewer GPUs, then name), for the nodes it still lacks (a gang: all of
  them in one pool, or none). A pool then launches up to `min_workers` with nothing waiting.
- **Limits.** A pool never has more than `max_workers` instances up or on their way
  (launching, registered or terminating: `LIVE_LAUNCH`), nor costs more than
  `max_cost_per_hour` at its `price_per_hour`. After failed launches it waits: the
  `backoff_s` of its consecutive failures, from the last one, doubling up to a cap.
- **Retiring.** A pool's idle worker that no waiting job takes is retired once idle for
  `idle_timeout_s`, down to `min_workers` (none when the pool is disabled); above
  `max_workers` (lowered since), at once. Never a busy worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.matching import (
    AGENT_FEATURES,
    Capacity,
    Feature,
    Requirement,
    fits,
    labels_match,
)
from gpufleet.domain.pool_limits import Room, room_of
from gpufleet.domain.pool_reasons import PoolReason, PoolWhy
from gpufleet.domain.pools import Launch, LaunchState, Pool
from gpufleet.domain.states import WorkerStatus


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A queued job the queue policy would start now, if a worker took it."""

    job_id: str
    requirement: Requirement
    shape: GangShape


@dataclass(frozen=True, slots=True)
class FleetWorker:
    capacity: Capacity
    pool_id: str | None = None  # the pool that launched it; None: not a pool's
    idle_since: datetime | None = None  # since when it is idle (None: it is not)
    free_soon: bool = False  # busy, with its job ending: it takes another soon


@dataclass(frozen=True, slots=True)
class PoolPlan:
    pool: str  # its name
    launch: int  # workers to launch now
    retire: tuple[str, ...]  # worker ids to retire (drain, then terminate)
    reason: PoolReason
    live: int  # instances up or on their way before this plan: what max counts
    jobs: tuple[str, ...]  # waiting jobs it is the pool for (launching for them, or not able)


@dataclass(frozen=True, slots=True)
class Plan:
    pools: Mapping[str, PoolPlan]  # by pool name
    # What will take each job without a new launch (worker ids, `launch:<id>` for one in
    # flight): all of its nodes, or the part of a gang the rest is launched beside.
    taken: Mapping[str, tuple[str, ...]]
    launching_for: Mapping[str, str]  # a job nothing takes whole: the pool launching for it
    held_back: Mapping[str, str]  # one a pool could launch for, but not now (its reason: why)
    # What each job waits for from a pool, in words: a launch in flight or planned for it,
    # or why the pool for it cannot launch now ("why is my job waiting?").
    waits: Mapping[str, PoolReason] = field(default_factory=dict)


def _free(w: FleetWorker) -> bool:
    """Will it take a job without a launch? Idle, registered and opening its stream, or busy
    and freeing soon; never spent, draining or offline."""
    cap = w.capacity
    if cap.spent or cap.gpu_count is None:
        return False
    return cap.status in (WorkerStatus.IDLE, WorkerStatus.CONNECTING) or (
        cap.status is WorkerStatus.BUSY and w.free_soon
    )


def shape_of(pool: Pool, unit_id: str) -> Capacity:
    """What a worker the pool launches offers: its labels and GPUs, every feature of
    `gpufleet worker`."""
    return Capacity(
        worker_id=unit_id,
        name=unit_id,
        status=WorkerStatus.IDLE,
        gpu_count=pool.gpu_count,
        labels=pool.labels,
        is_local=False,
        worker_type=pool.worker_type,
        features=frozenset(AGENT_FEATURES),
    )


class _Units:
    """Free units of one shape (one machine kind, or one pool's launches in flight)."""

    __slots__ = ("cap", "ids", "order")

    def __init__(self, cap: Capacity, *, launching: bool = False) -> None:
        self.cap = cap
        self.ids: list[str] = []
        # As dispatch chooses: a worker up before one launching, remote before the local
        # runner, the smallest that fits.
        self.order = (launching, cap.is_local, cap.gpu_count or 0, cap.worker_id)

    def take(self, n: int) -> list[str]:
        took = self.ids[len(self.ids) - n :] if n else []
        del self.ids[len(self.ids) - len(took) :]
        return took


# ---- the decision ----------------------------------------------------------------------------


def _node(job: WaitingJob) -> tuple[Requirement, str | None]:
    """What one node of the job asks of a worker, and the label its nodes share."""
    if job.shape.nodes <= 1:
        return job.requirement, None
    req = job.requirement
    node = replace(req, gpu_count=job.shape.gpus_per_node, needs=req.needs | {Feature.GANG})
    return node, job.shape.same_label


def _fits(node: Requirement, same: str | None, cap: Capacity) -> bool:
    if cap.gpu_count is None or cap.gpu_count < node.gpu_count:  # the cheap test first
        return False
    return (same is None or same in cap.labels) and fits(node, cap)


def _count(classes: Sequence[_Units]) -> int:
    return sum(len(c.ids) for c in classes)


def _covering(classes: list[_Units], same: str | None, need: int) -> list[_Units] | None:
    """Free units enough for the job's `need` nodes (all with one value of `same`)."""
    if same is None:
        return classes if _count(classes) >= need else None
    groups: dict[str, list[_Units]] = {}
    for c in classes:
        groups.setdefault(c.cap.labels[same], []).append(c)
    return next((g for g in groups.values() if _count(g) >= need), None)


def _take(classes: Sequence[_Units], n: int) -> list[str]:
    took: list[str] = []
    for c in classes:
        if len(took) == n:
            break
        took += c.take(min(n - len(took), len(c.ids)))
    return took


class _Decision:
    """One run of `decide`: the free units, the pools' rooms, what each job got."""

    def __init__(
        self,
        pools: Sequence[Pool],
        workers: Sequence[FleetWorker],
        launches: Sequence[Launch],
        now: datetime,
    ) -> None:
        self.now = now
        of_pool: dict[str, list[Launch]] = {p.id: [] for p in pools}
        for launch in launches:
            of_pool.get(launch.pool_id, []).append(launch)
        self.rooms = {p.id: room_of(p, of_pool[p.id], now) for p in pools}
        self.templates = {p.id: shape_of(p, f"pool:{p.name}") for p in pools}
        registered = {w.capacity.worker_id for w in workers if w.capacity.gpu_count is not None}
        units: dict[Any, _Units] = {}
        for w in workers:
            if _free(w):
                cap = w.capacity
                kind = (frozenset(cap.labels.items()), cap.gpu_count, cap.is_local, cap.features)
                units.setdefault(kind, _Units(cap)).ids.append(cap.worker_id)
        for p in pools:
            for launch in of_pool[p.id]:
                if launch.state is LaunchState.LAUNCHING and launch.worker_id not in registered:
                    unit = f"launch:{launch.id}"
                    shape = _Units(shape_of(p, unit), launching=True)
                    units.setdefault(("pool", p.id), shape).ids.append(unit)
        self.units = sorted(units.values(), key=lambda u: u.order)
        self.by_preference = sorted(self.rooms.values(), key=lambda r: r.preference)
        self.cache: dict[Any, tuple[list[_Units], list[Room]]] = {}
        self.labelled: dict[Any, tuple[list[_Units], list[Room]]] = {}
        self.taken: dict[str, tuple[str, ...]] = {}
        self.launching_for: dict[str, str] = {}
        self.held_back: dict[str, str] = {}
        self.waits: dict[str, PoolReason] = {}
        self.unit_room = {
            f"launch:{x.id}": self.rooms[x.pool_id] for x in launches if x.pool_id in self.rooms
        }

    def _candidates(self, node: Requirement, same: str | None) -> tuple[list[_Units], list[Room]]:
        """The free units and the pools (in preference order) that fit one node of a job."""
        wanted = tuple(sorted(node.labels.items()))
        key = (node.target, node.gpu_count, wanted, node.needs, same)
        found = self.cache.get(key)
        if found is None:
            # Labels first, once for every job that asks the same (the costly test).
            units, rooms = self.labelled.get(wanted) or self._labelled(node, wanted)
            classes = [u for u in units if _fits(node, same, u.cap)]
            fitting = [r for r in rooms if _fits(node, same, self.templates[r.pool.id])]
            found = self.cache[key] = (classes, fitting)
        return found

    def _labelled(
        self, node: Requirement, wanted: tuple[tuple[str, str], ...]
    ) -> tuple[list[_Units], list[Room]]:
        keys = node.labels.keys()  # a key missing is the cheapest refusal, and the commonest

        def match(have: Mapping[str, str]) -> bool:
            return keys <= have.keys() and labels_match(node.labels, have)

        units = [u for u in self.units if match(u.cap.labels)]
        rooms = [r for r in self.by_preference if match(r.pool.labels)]
        self.labelled[wanted] = (units, rooms)
        return units, rooms

    def place(self, job: WaitingJob) -> None:
        """Cover the job with free units, else launch its missing nodes in the pool for it."""
        node, same = _node(job)
        classes, rooms = self._candidates(node, same)
        need = job.shape.nodes
        covering = _covering(classes, same, need)
        if covering is not None:
            self.taken[job.job_id] = took = tuple(_take(covering, need))
            self._waits_for_launches(job.job_id, took)
            return
        have_any = _count(classes)  # fewer than `need` (not covered)
        first: tuple[Room, int] | None = None  # the first pool that refused, and for how many
        for room in rooms:
            partial = classes
            if same is not None:
                value = room.pool.labels.get(same)
                partial = [c for c in classes if c.cap.labels[same] == value]
            have = min(need - 1, have_any if same is None else _count(partial))
            if room.allows(need - have):
                if have:
                    self.taken[job.job_id] = tuple(_take(partial, have))
                room.planned += need - have
                room.jobs.append(job.job_id)
                self.launching_for[job.job_id] = room.pool.name
                self.waits[job.job_id] = self.launching(room, need - have, room.planned)
                return
            if first is None or (not first[0].pool.enabled and room.pool.enabled):
                first = (room, need - have)  # were it enabled, the first that could
        if first is not None:
            room, needed = first
            room.jobs.append(job.job_id)
            self.held_back[job.job_id] = room.pool.name
            refusal = room.refusal(needed, job.job_id)
            if refusal is not None:
                self.waits[job.job_id] = refusal
            room.blocked = room.blocked or refusal

    def _waits_for_launches(self, job_id: str, took: tuple[str, ...]) -> None:
        """A job taken by launches in flight waits for them: its pool's, in words."""
        rooms = [self.unit_room[u] for u in took if u in self.unit_room]
        if rooms:
            self.waits[job_id] = self.launching(rooms[0], len(rooms), 0)

    def launching(self, room: Room, launching: int, planned: int) -> PoolReason:
        """The pool launches `launching` workers (of which `planned` not yet begun)."""
        pool = room.pool
        ago = None if room.last_launch is None else (self.now - room.last_launch).total_seconds()
        said: dict[str, Any] = {"pool": pool.name, "max": pool.max_workers, "min": pool.min_workers}
        count = room.live + planned
        said |= {"launching": launching, "count": count, "last_launch_ago_s": ago}
        return PoolReason(PoolWhy.LAUNCHING, said)

    def top_up(self, room: Room) -> None:
        """Launch up to `min_workers`, as far as the pool may."""
        deficit = room.pool.min_workers - room.standing - room.planned
        if deficit <= 0 or not room.pool.enabled:
            return
        add = min(deficit, room.room()[0]) if room.allows(1) else 0
        room.planned += add
        if add < deficit:
            room.blocked = room.blocked or room.refusal(1, None)

    def retire(self, room: Room, workers: Sequence[FleetWorker]) -> tuple[str, ...]:
        pool = room.pool
        used = {unit for units in self.taken.values() for unit in units}
        idle = sorted(
            (
                w
                for w in workers
                if w.pool_id == pool.id
                and w.capacity.status is WorkerStatus.IDLE
                and not w.capacity.spent
                and w.capacity.worker_id not in used
            ),
            key=lambda w: (w.idle_since or self.now, w.capacity.worker_id),
        )
        over = max(0, room.standing - pool.max_workers)
        retire = [w.capacity.worker_id for w in idle[:over]]
        spare = (
            room.standing + room.planned - len(retire) - (pool.min_workers if pool.enabled else 0)
        )
        for w in idle[over:]:
            if spare <= 0:
                break
            if w.idle_since is not None and (
                (self.now - w.idle_since).total_seconds() >= pool.idle_timeout_s
            ):
                retire.append(w.capacity.worker_id)
                spare -= 1
        return tuple(retire)

    def reason(self, room: Room, retire: tuple[str, ...]) -> PoolReason:
        pool = room.pool
        said: dict[str, Any] = {"pool": pool.name, "max": pool.max_workers, "min": pool.min_workers}
        if not pool.enabled:
            return PoolReason(PoolWhy.DISABLED, said)
        if room.planned:
            return self.launching(room, room.planned, room.planned)
        if room.blocked is not None:
            return room.blocked
        if retire:
            said |= {"retiring": len(retire), "idle_timeout_s": pool.idle_timeout_s}
            return PoolReason(PoolWhy.RETIRING, said)
        return PoolReason(PoolWhy.STEADY, said | {"count": room.live})


def decide(
    pools: Sequence[Pool],
    jobs: Sequence[WaitingJob],
    workers: Sequence[FleetWorker],
    launches: Sequence[Launch],
    now: datetime,
) -> Plan:
    """The plan for every pool, from the jobs waiting (in queue order), the fleet's workers,
    and the pools' launches (every live one, and enough ended ones to count failures)."""
    run = _Decision(pools, workers, launches, now)
    for job in jobs:
        run.place(job)
    plans: dict[str, PoolPlan] = {}
    for room in run.rooms.values():
        run.top_up(room)
        retire = run.retire(room, workers)
        plans[room.pool.name] = PoolPlan(
            pool=room.pool.name,
            launch=room.planned,
            retire=retire,
            reason=run.reason(room, retire),
            live=room.live,
            jobs=tuple(room.jobs),
        )
    return Plan(plans, run.taken, run.launching_for, run.held_back, run.waits)
