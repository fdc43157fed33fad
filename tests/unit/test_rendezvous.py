"""The two-phase start of a multi-node attempt and its fence (domain/rendezvous.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpufleet.domain import rendezvous
from gpufleet.domain.records import AttemptNode
from gpufleet.domain.states import AttemptStatus, NodeState

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


def running(node: AttemptNode) -> AttemptNode:
    return replace(node, state=NodeState.RUNNING)


def ended(node: AttemptNode) -> AttemptNode:
    return replace(node, state=NodeState.ENDED)


def test_rank_zeros_completion_frees_it_and_the_ended_nodes_and_keeps_those_still_going() -> None:
    three = [running(n) for n in nodes(3)]
    three[2] = ended(three[2])
    release = rendezvous.on_end(three, "w0", AttemptStatus.COMPLETED)
    assert release.free == ("w0", "w2")
    assert release.outliving == (three[1],)


def test_an_attempt_that_did_not_complete_frees_every_node() -> None:
    three = [running(n) for n in nodes(3)]
    for outcome in (AttemptStatus.FAILED, AttemptStatus.LOST, AttemptStatus.CANCELLED):
        release = rendezvous.on_end(three, "w0", outcome)
        assert release == rendezvous.Release(("w0", "w1", "w2"))


def test_a_node_outliving_a_completed_attempt_goes_on_until_its_own_end() -> None:
    late = rendezvous.late_report
    done, going = AttemptStatus.COMPLETED, NodeState.RUNNING
    assert late(done, going, AttemptStatus.RUNNING) is rendezvous.Late.GOES_ON
    assert late(done, going, AttemptStatus.COMPLETED) is rendezvous.Late.ENDS
    assert late(done, going, AttemptStatus.FAILED) is rendezvous.Late.ENDS
    assert late(done, NodeState.ENDED, AttemptStatus.COMPLETED) is None  # a repeat
    assert late(AttemptStatus.FAILED, going, AttemptStatus.RUNNING) is None  # told to stop
    assert rendezvous.outlives(done) and not rendezvous.outlives(AttemptStatus.FAILED)


def test_a_late_failure_is_noted_and_a_late_completion_is_not() -> None:
    note = rendezvous.late_failure(1, "w1", AttemptStatus.FAILED, "exit 3")
    assert note == "node 1 (worker w1) failed after rank 0 completed: exit 3"
    assert rendezvous.late_failure(1, "w1", AttemptStatus.COMPLETED, None) is None


def test_a_node_is_overdue_only_past_the_grace() -> None:
    grace = rendezvous.OUTLIVE_GRACE
    assert not rendezvous.overdue(NOW, NOW + grace)
    assert rendezvous.overdue(NOW, NOW + grace + timedelta(seconds=1))
    assert not rendezvous.overdue(None, NOW)


def test_a_start_or_a_completion_besides_rank_0_frees_no_other_nodes_worker() -> None:
    alone = rendezvous.frees_own_only
    assert all(alone(rank, s) for rank in (0, 3) for s in rendezvous.STARTS)
    assert alone(1, AttemptStatus.COMPLETED)
    assert not alone(0, AttemptStatus.COMPLETED)  # rank 0's completion ends the attempt
    assert not any(alone(rank, s) for rank in (0, 1) for s in rendezvous.ENDS_ATTEMPT)
