"""What a waiting gang says (`gang.waiting`, in each surface's words by `domain/advice.py`)."""

from __future__ import annotations

from gpufleet.domain.advice import Surface, say_wait
from gpufleet.domain.gang import waiting
from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.matching import Capacity, Feature, Requirement, WaitCode
from gpufleet.domain.states import Target, WorkerStatus

GANG = frozenset({Feature.COMMAND, Feature.GANG})
NODE = Requirement(Target.AUTO, 1, {}, frozenset({Feature.COMMAND, Feature.GANG}))


def worker(
    i: int,
    zone: str,
    status: WorkerStatus = WorkerStatus.IDLE,
    features: frozenset[Feature] | None = GANG,
) -> Capacity:
    return Capacity(f"w{i}", f"w{i}", status, 1, {"zone": zone}, False, features=features)


def test_a_gang_counts_the_idle_workers_of_its_largest_label_group_as_matching_now() -> None:
    caps = [
        worker(1, "a"),
        worker(2, "b"),
        worker(3, "b"),
        worker(4, "b", WorkerStatus.BUSY),  # could, once free
        worker(5, "b", features=frozenset({Feature.COMMAND})),  # never: no `gang`
    ]

    wait = waiting(GangShape(4, 1, "zone"), NODE, caps, held=2)

    assert wait.code is WaitCode.WAITING_FOR_NODES
    assert dict(wait.params) == {
        "nodes": 4,
        "matching": 2,
        "could": 4,
        "held": 2,
        "same_label": "zone",
    }
    assert say_wait(wait, Surface.CLI) == (
        "waiting for 4 workers that run multi-node jobs (feature gang) with one value of "
        "label zone; 2 match now, 2 held for it"
    )


def test_a_gang_too_few_workers_could_ever_run_says_what_to_do_in_each_surface() -> None:
    wait = waiting(GangShape(3, 1), NODE, [worker(1, "a")], held=0)

    said = {surface: say_wait(wait, surface) for surface in Surface}

    head = (
        "waiting for 3 workers that run multi-node jobs (feature gang); 1 matches now; only 1 "
        "registered worker could be one of its nodes: start more workers that say `gang` in "
        "their features, or submit again "
    )
    assert said == {
        Surface.API: head + "with fewer nodes",
        Surface.UI: head + "from Train with fewer Nodes",
        Surface.CLI: head + "with fewer --nodes",
    }
