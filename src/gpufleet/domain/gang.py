"""Multi-node (gang) jobs in one dispatch round: all the nodes at once, or none. Pure.

A gang of N nodes is offered only as N distinct idle workers that match its requirement,
say `gang` in their features and, when it names `same_label`, share one value of that label
(`decide`). A partial gang is never offered.

While it cannot complete, the gang at the head of the queue holds the matching workers that
free up (never N of them: with N it would claim), so that smaller jobs behind it do not take
them one by one forever (starvation). Two rules keep holds from doing harm:

- Only the first gang in the queue's order holds (`plan`); every other gang may only claim a
  complete set from what no one holds. Two gangs each holding part of what the other needs
  (the deadlock gang schedulers are known for) cannot happen: there is one holder.
- A hold lasts at most `hold_s` (`gang_hold`, 300 s by default), counted from its start.
  Then it is released, with the reason, and for that round the gang holds nothing: the
  released workers go to other jobs (a gang behind it may claim them). The round after, the
  gang may hold again with a fresh clock. A gang that the fleet cannot complete in `hold_s`
  thus takes turns with the rest of the queue instead of blocking it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby

from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.matching import (
    Capacity,
    Feature,
    Requirement,
    Wait,
    WaitCode,
    can_run_now,
    fits,
)

GANG_HOLD_S = 300.0  # `--gang-hold`'s default


@dataclass(frozen=True, slots=True)
class Holding:
    """The workers held for one gang now, and since when (the hold's start)."""

    worker_ids: frozenset[str]
    since: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    """Offer the gang to these N workers, rank 0 first."""

    worker_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep these idle workers for the gang (fewer than it needs); `since`: the hold's start."""

    worker_ids: tuple[str, ...]
    since: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Release:
    """Free these workers for other jobs this round; the gang holds nothing this round."""

    worker_ids: tuple[str, ...]
    reason: str


Decision = Claim | Hold | Release


@dataclass(frozen=True, slots=True)
class Gang:
    """A gang job waiting, as `plan` sees it."""

    job_id: str
    shape: GangShape
    requirement: Requirement
    holding: Holding | None = None


def eligible(shape: GangShape, req: Requirement, cap: Capacity) -> bool:
    """May this worker be one node of the gang now? Idle, matching, saying `gang` (a worker
    whose features are not known yet does not), and with the `same_label` label."""
    node = replace(req, gpu_count=shape.gpus_per_node, needs=req.needs | {Feature.GANG})
    if cap.features is None or Feature.GANG not in cap.features:
        return False
    if shape.same_label is not None and shape.same_label not in cap.labels:
        return False
    return can_run_now(node, cap)


def held_reason(job_id: str, held: int, nodes: int) -> str:
    return f"held for job {job_id} ({held} of {nodes} nodes)"


def waiting(shape: GangShape, req: Requirement, caps: Iterable[Capacity], held: int) -> Wait:
    """What a waiting gang says: the nodes it needs, how many workers may be one now (idle,
    saying `gang`, matching, in the largest group of one `same_label` value), how many more
    could once free, and how many are held for it."""
    caps = list(caps)
    node = replace(req, gpu_count=shape.gpus_per_node, needs=req.needs | {Feature.GANG})
    fit = [c for c in caps if eligible(shape, req, c)]
    could = [
        c
        for c in caps
        if c.features is not None
        and fits(node, c)
        and (shape.same_label is None or shape.same_label in c.labels)
    ]
    return Wait(
        WaitCode.WAITING_FOR_NODES,
        {
            "nodes": shape.nodes,
            "matching": max((len(g) for _, g in _groups(shape, fit)), default=0),
            "could": len(could),
            "held": held,
            "same_label": shape.same_label,
        },
    )


def decide(
    job_id: str,
    shape: GangShape,
    req: Requirement,
    idle: Iterable[Capacity],
    holding: Holding | None,
    hold_s: float,
    now: datetime,
) -> Decision:
    """One round for the gang at the head of its queue. `idle`: the idle workers no other
    gang holds (its own held ones among them, while they are idle); `holding`: its hold."""
    held = holding.worker_ids if holding is not None else frozenset()
    fit = [c for c in idle if eligible(shape, req, c)]
    # Its own held workers first (so a claim leaves the unheld ones to others), then as
    # `choose_worker` ranks: remote before local, the smallest that fits, the id.
    fit.sort(key=lambda c: (c.worker_id not in held, c.is_local, c.gpu_count or 0, c.worker_id))
    groups = _groups(shape, fit)

    def held_in(group: list[Capacity]) -> int:
        return sum(c.worker_id in held for c in group)

    complete = [(value, g) for value, g in groups if len(g) >= shape.nodes]
    if complete:  # the one that keeps most of its hold, then the smallest, then by value
        _, group = min(complete, key=lambda vg: (-held_in(vg[1]), len(vg[1]), vg[0]))
        return Claim(tuple(c.worker_id for c in group[: shape.nodes]))
    if held and holding is not None and (now - holding.since).total_seconds() >= hold_s:
        return Release(
            tuple(sorted(held)),
            f"released after {hold_s:g} s {held_reason(job_id, len(held), shape.nodes)}: "
            "the gang could not complete, so other jobs may take these workers",
        )
    # None completes: hold the group nearest to it (most workers, then most already held).
    _, group = min(groups, key=lambda vg: (-len(vg[1]), -held_in(vg[1]), vg[0]), default=("", []))
    ids = tuple(c.worker_id for c in group)  # fewer than `nodes`, or it would have claimed
    since = holding.since if held and holding is not None else now
    return Hold(ids, since, held_reason(job_id, len(ids), shape.nodes))


def _groups(shape: GangShape, fit: list[Capacity]) -> list[tuple[str, list[Capacity]]]:
    """The workers that may form one gang together: one group (named "") without
    `same_label`, else one group a value of it; each keeps `fit`'s order."""
    if shape.same_label is None:
        return [("", fit)] if fit else []
    label = shape.same_label

    def value(c: Capacity) -> str:
        return c.labels[label]

    by_value = sorted(fit, key=value)  # stable: each group keeps fit's order
    return [(v, list(g)) for v, g in groupby(by_value, key=value)]


def plan(
    gangs: Sequence[Gang], idle: Sequence[Capacity], hold_s: float, now: datetime
) -> dict[str, Decision]:
    """One round for every waiting gang, `gangs` in the queue's order: each decision, by job.

    The first gang decides as `decide` says; every other one claims a complete set or, not
    able to, releases what it holds (it held while it was first) and waits. A gang never
    sees workers an earlier gang claimed or holds this round, nor those a later gang holds
    from an earlier round (it releases them at its turn), so no worker is held or claimed
    for two gangs."""
    taken: set[str] = set()
    out: dict[str, Decision] = {}
    for index, gang in enumerate(gangs):
        others = {w for g in gangs[index + 1 :] if g.holding for w in g.holding.worker_ids}
        pool = [c for c in idle if c.worker_id not in taken and c.worker_id not in others]
        decision = decide(
            gang.job_id, gang.shape, gang.requirement, pool, gang.holding, hold_s, now
        )
        if index > 0 and not isinstance(decision, Claim):
            decision = _behind(gang, gangs[0].job_id, now)
        if isinstance(decision, Claim | Hold):
            taken.update(decision.worker_ids)
        out[gang.job_id] = decision
    return out


def _behind(gang: Gang, head: str, now: datetime) -> Decision:
    """A gang that is not first and cannot complete: it holds nothing."""
    why = f"job {head} is ahead of job {gang.job_id}, and only the first gang in the queue holds"
    if gang.holding is not None and gang.holding.worker_ids:
        return Release(tuple(sorted(gang.holding.worker_ids)), f"released: {why}")
    return Hold((), now, f"{held_reason(gang.job_id, 0, gang.shape.nodes)}: {why}")
