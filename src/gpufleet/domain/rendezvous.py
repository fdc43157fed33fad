"""The two-phase start of a multi-node (gang) attempt, and who may speak for which node. Pure.

Every node's worker acknowledges its offer (rank 0's with a free port of its machine, the
`MASTER_PORT`); only when all N did are the nodes started, each with the same rendezvous
(`Start`). So no node ever waits on a rank that was never offered or never answered. A
report about a node is fenced by attempt and rank: a worker speaks only for its own node.

The attempt completes when rank 0 completes, but another node's process may outlive it (the
end of a torchrun: its teardown, its last lines). Such a node keeps its worker (`on_end`)
until it reports its own end (`late_report`) or `OUTLIVE_GRACE` passes (`overdue`): then it
is told to stop and its worker is freed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.domain.records import AttemptNode
from gpufleet.domain.states import AttemptStatus, NodeState

MIN_PORT, MAX_PORT = 1, 65_535

# How a node's own end counts for the whole attempt: a node that fails or stops ends it;
# one that completes ends only itself (rank 0's completion ends the attempt).
ENDS_ATTEMPT = frozenset({AttemptStatus.FAILED, AttemptStatus.CANCELLED, AttemptStatus.PREEMPTED})

# A node's start reports: they write its node, the attempt and the job, and free no worker.
STARTS = frozenset({AttemptStatus.ACKNOWLEDGED, AttemptStatus.RUNNING})

# How long a node may outlive its attempt's completion (rank 0's) before it is told to stop.
# Its process ends with rank 0's collective within seconds or minutes (its teardown: the
# process group, data loader workers, its last writes); what is left then is the worker's
# own work: its last log lines and its report, each retried. Ten minutes bounds a slow
# teardown with room to spare; a node still going after that is hung, and its worker is
# wanted for other jobs.
OUTLIVE_GRACE = timedelta(minutes=10)


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


@dataclass(frozen=True, slots=True)
class Release:
    """What an attempt's end does to its nodes: the workers freed now, and the nodes that
    outlive it (still running, their workers kept on the attempt)."""

    free: tuple[str, ...]
    outliving: tuple[AttemptNode, ...] = ()


def on_end(nodes: Sequence[AttemptNode], attempt_worker: str, outcome: AttemptStatus) -> Release:
    """Which workers the attempt's end frees. An attempt that did not complete frees every
    node (the others are told to stop). One that completed (rank 0 did) frees rank 0's
    worker and those of nodes that ended already; any other node still going outlives it."""
    outliving: tuple[AttemptNode, ...] = ()
    if outcome is AttemptStatus.COMPLETED:
        outliving = tuple(n for n in nodes if n.rank != 0 and n.state is not NodeState.ENDED)
    kept = {n.worker_id for n in outliving}
    every = {attempt_worker, *(n.worker_id for n in nodes)}
    return Release(tuple(sorted(every - kept)), outliving)


class Late(StrEnum):
    """What a report from a node that outlives its completed attempt does."""

    GOES_ON = "goes_on"  # it still runs (a repeated acknowledgement or running): no change
    ENDS = "ends"  # its own end: the node ends, its worker is freed; the job stays completed


def frees_own_only(rank: int, new: AttemptStatus) -> bool:
    """Whether a node's report can free no worker but its own: a start report (it frees
    none), or the completion of a node besides rank 0 (it ends that node alone, whether
    the attempt goes on or rank 0 completed it). Any other end may end the whole attempt
    and free every node's worker. `rank` as the report says it: one that lies is fenced
    before it writes anything."""
    return new in STARTS or (new is AttemptStatus.COMPLETED and rank > 0)


def late_report(attempt: AttemptStatus, node: NodeState, new: AttemptStatus) -> Late | None:
    """How a node's report counts once its attempt ended; None: the node does not outlive
    a completed attempt (it ended, or the attempt did not complete), so there is nothing to
    take but a repeat of its end."""
    if attempt is not AttemptStatus.COMPLETED or node is NodeState.ENDED:
        return None
    if new in ENDS_ATTEMPT or new is AttemptStatus.COMPLETED:
        return Late.ENDS
    return Late.GOES_ON


def outlives(attempt: AttemptStatus) -> bool:
    """A worker still holding an attempt that completed is a node outliving rank 0 (a
    one-node attempt frees its worker when it ends): its heartbeat may name the job."""
    return attempt is AttemptStatus.COMPLETED


def overdue(completed_at: datetime | None, now: datetime) -> bool:
    """Has a node outlived its attempt's completion past `OUTLIVE_GRACE`?"""
    return completed_at is not None and now - completed_at > OUTLIVE_GRACE


def late_failure(rank: int, worker_id: str, new: AttemptStatus, error: str | None) -> str | None:
    """What is noted of a node that ended otherwise than completed after its attempt
    completed (the job stays completed); None for one that completed."""
    if new is AttemptStatus.COMPLETED:
        return None
    why = f"node {rank} (worker {worker_id}) {new.value} after rank 0 completed"
    return f"{why}: {error}" if error else why
