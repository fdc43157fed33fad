"""The two-phase start of a multi-node (gang) attempt, and who may speak for which node. Pure.

Every node's worker acknowledges its offer (rank 0's with a free port of its machine, the
`MASTER_PORT`); only when all N did are the nodes started, each with the same rendezvous
(`Start`). So no node ever waits on a rank that was never offered or never answered. A
report about a node is fenced by attempt and rank: a worker speaks only for its own node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.domain.records import AttemptNode
from gpufleet.domain.states import AttemptStatus, NodeState

MIN_PORT, MAX_PORT = 1, 65_535

# How a node's own end counts for the whole attempt: a node that fails or stops ends it;
# one that completes ends only itself (rank 0's completion ends the attempt).
ENDS_ATTEMPT = frozenset({AttemptStatus.FAILED, AttemptStatus.CANCELLED, AttemptStatus.PREEMPTED})


@dataclass(frozen=True, slots=True)
class Start:
    """The rendezvous every node starts with: rank 0's address and port, every node's
    address in rank order."""

    master_addr: str
    master_port: int
    node_addrs: tuple[str, ...]


def fence(nodes: Sequence[AttemptNode], worker_id: str, rank: int) -> AttemptNode | str:
    """The node `worker_id` reports on as `rank`, or why it may not: a worker that is no
    node of the attempt, or another node's rank."""
    own = [n for n in nodes if n.worker_id == worker_id]
    if not own:
        return f"worker {worker_id} is not a node of this attempt; it speaks only for its own"
    named = next((n for n in nodes if n.rank == rank), None)
    if named is None or named.worker_id != worker_id:
        ranks = ", ".join(str(n.rank) for n in own)
        return (
            f"node {rank} of this attempt is not worker {worker_id}'s; it is node {ranks} "
            "and reports only as that node_rank"
        )
    return named


def ack_problem(rank: int, port: int | None) -> str | None:
    """What is wrong with a node's acknowledgement: rank 0's must name its free port."""
    if rank == 0 and port is None:
        return "node 0 acknowledges with the free port it chose for MASTER_PORT (port)"
    if port is not None and not MIN_PORT <= port <= MAX_PORT:
        return f"port {port} is not a TCP port (1-65535)"
    return None


def acknowledged(node: AttemptNode) -> bool:
    return node.state is not NodeState.OFFERED


def start(nodes: Sequence[AttemptNode]) -> Start | None:
    """The rendezvous, once every node acknowledged (with an address, rank 0 with a port);
    None while any has not."""
    if not nodes or not all(acknowledged(n) and n.address for n in nodes):
        return None
    first = nodes[0]
    if first.rank != 0 or first.port is None:
        return None
    return Start(first.address or "", first.port, tuple(n.address or "" for n in nodes))


def all_running(nodes: Sequence[AttemptNode]) -> bool:
    """The attempt runs when every node runs (a node that ended after it ran counts)."""
    return bool(nodes) and all(n.state in (NodeState.RUNNING, NodeState.ENDED) for n in nodes)
