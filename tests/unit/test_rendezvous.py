"""The two-phase start of a multi-node attempt and its fence (domain/rendezvous.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gpufleet.domain import rendezvous
from gpufleet.domain.records import AttemptNode
from gpufleet.domain.states import NodeState

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def nodes(n: int) -> list[AttemptNode]:
    return [AttemptNode("a_1", r, "j_1", 1, f"w{r}", NodeState.OFFERED, NOW) for r in range(n)]


def acked(node: AttemptNode, port: int | None = None) -> AttemptNode:
    return replace(node, state=NodeState.ACKNOWLEDGED, address=f"10.0.0.{node.rank}", port=port)


def test_no_start_until_every_node_acknowledged() -> None:
    three = nodes(3)
    three[0] = acked(three[0], 29_500)
    three[2] = acked(three[2])
    assert rendezvous.start(three) is None
    three[1] = acked(three[1])
    assert rendezvous.start(three) == rendezvous.Start(
        "10.0.0.0", 29_500, ("10.0.0.0", "10.0.0.1", "10.0.0.2")
    )


def test_no_start_without_rank_zeros_port_or_without_nodes() -> None:
    assert rendezvous.start([acked(n) for n in nodes(2)]) is None
    assert rendezvous.start([]) is None


def test_a_worker_speaks_only_for_its_own_node() -> None:
    two = nodes(2)
    assert rendezvous.fence(two, "w1", 1) == two[1]
    assert "it is node 1" in str(rendezvous.fence(two, "w1", 0))
    assert "not a node of this attempt" in str(rendezvous.fence(two, "w9", 0))
    assert "it is node 1" in str(rendezvous.fence(two, "w1", 5))


def test_rank_zero_acknowledges_with_a_port() -> None:
    assert rendezvous.ack_problem(0, None) is not None
    assert rendezvous.ack_problem(0, 70_000) is not None
    assert rendezvous.ack_problem(0, 29_500) is None
    assert rendezvous.ack_problem(1, None) is None


def test_the_attempt_runs_when_every_node_runs() -> None:
    two = [replace(n, state=NodeState.RUNNING) for n in nodes(2)]
    assert rendezvous.all_running(two)
    assert not rendezvous.all_running([two[0], acked(nodes(2)[1])])
    assert not rendezvous.all_running([])
