"""One node of a multi-node (gang) job on this worker: the two-phase start.

The worker acknowledges its node's offer (rank 0 with a free TCP port of this machine, the
job's MASTER_PORT), then waits for the orchestrator's `job_start`, sent once every node
acknowledged, and starts the job's process with the rendezvous in its environment, so that
`torchrun --nnodes $NNODES --node-rank $NODE_RANK --master-addr $MASTER_ADDR
--master-port $MASTER_PORT --nproc-per-node $NPROC_PER_NODE train.py` runs unchanged.
While it waits it acknowledges again now and then: the orchestrator answers a repeat with
the start again, should the first have been lost with a stream.
"""

from __future__ import annotations

import asyncio
import socket
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from gpufleet.errors import AgentError

ACK_AGAIN_S = 5.0  # while waiting for job_start


@dataclass(frozen=True, slots=True)
class Node:
    """This worker's node of the gang, as its offer says."""

    rank: int
    count: int

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> Node | None:
        """The node an offer names; None for a one-node offer."""
        rank, count = event.get("node_rank"), event.get("num_nodes")
        if rank is None and count is None:
            return None
        if not _whole(rank) or not _whole(count) or not 0 <= rank < count:
            raise AgentError(
                f"the offer names no usable node: node_rank {rank!r}, num_nodes {count!r}"
            )
        return cls(rank, count)

    def acknowledgement(self, advertise_addr: str | None) -> dict[str, Any]:
        """The fields of this node's `acknowledged` report (rank 0 picks its port now)."""
        body: dict[str, Any] = {"node_rank": self.rank}
        if self.rank == 0:
            body["port"] = free_port()
        if advertise_addr:
            body["address"] = advertise_addr
        return body


@dataclass(frozen=True, slots=True)
class Rendezvous:
    master_addr: str
    master_port: int
    node_rank: int
    node_addrs: tuple[str, ...]

    @classmethod
    def of(cls, event: Mapping[str, Any], node: Node) -> Rendezvous:
        addr, port, addrs = (
            event.get("master_addr"),
            event.get("master_port"),
            event.get("node_addrs"),
        )
        if (
            not isinstance(addr, str)
            or not _whole(port)
            or not isinstance(addrs, list)
            or len(addrs) != node.count
            or not all(isinstance(a, str) and a for a in addrs)
            or event.get("node_rank") != node.rank
        ):
            raise AgentError(f"job_start without a usable rendezvous: {dict(event)!r:.300}")
        return cls(addr, port, node.rank, tuple(addrs))

    def environment(self, gpus: int) -> dict[str, str]:
        """What the job's process gets: torchrun's and accelerate's names, and gpufleet's."""
        nodes = str(len(self.node_addrs))
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "NODE_RANK": str(self.node_rank),
            "NNODES": nodes,
            "NPROC_PER_NODE": str(max(1, gpus)),
            "GPUFLEET_NODE_RANK": str(self.node_rank),
            "GPUFLEET_NUM_NODES": nodes,
            "GPUFLEET_NODE_ADDRS": ",".join(self.node_addrs),
        }


class StartSignal:
    """Where the agent hands this node its `job_start`, and the job run waits for it."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._event: Mapping[str, Any] | None = None
        self._arrived = asyncio.Event()

    def arrive(self, event: Mapping[str, Any]) -> None:
        self._event = event
        self._arrived.set()

    async def wait(
        self, stop: asyncio.Event, ack_again: Callable[[], Awaitable[None]]
    ) -> Rendezvous | None:
        """The rendezvous once `job_start` came; None if the run was stopped first. Every
        `ACK_AGAIN_S` without it, `ack_again` (the orchestrator answers with the start)."""
        while True:
            waits = [
                asyncio.ensure_future(self._arrived.wait()),
                asyncio.ensure_future(stop.wait()),
            ]
            try:
                await asyncio.wait(waits, timeout=ACK_AGAIN_S, return_when=FIRST_COMPLETED)
            finally:
                for each in waits:
                    each.cancel()
            if stop.is_set():
                return None
            if self._event is not None:
                return Rendezvous.of(self._event, self.node)
            await ack_again()


def free_port() -> int:
    """A TCP port free on this machine now (the kernel's pick), for rank 0's MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
        return port


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
