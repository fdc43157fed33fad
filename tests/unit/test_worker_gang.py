"""One node of a multi-node job on the worker (worker/gang.py): what its offer names, its
acknowledgement, the start it waits for, and the environment its process gets."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gpufleet.errors import AgentError
from gpufleet.worker import gang
from gpufleet.worker.gang import Node, Rendezvous, StartSignal

START = {
    "type": "job_start",
    "job_id": "j_1",
    "attempt_id": "a_1",
    "node_rank": 1,
    "num_nodes": 2,
    "master_addr": "10.0.0.1",
    "master_port": 29_500,
    "node_addrs": ["10.0.0.1", "10.0.0.2"],
}


def test_a_one_node_offer_names_no_node_and_a_gang_offer_its_own() -> None:
    assert Node.of({"job_id": "j_1"}) is None
    assert Node.of({"node_rank": 1, "num_nodes": 2}) == Node(1, 2)
    for bad in ({"node_rank": 2, "num_nodes": 2}, {"node_rank": True, "num_nodes": 2}):
        with pytest.raises(AgentError, match="no usable node"):
            Node.of(bad)


def test_rank_zero_acknowledges_with_a_port_free_on_this_machine() -> None:
    body = Node(0, 2).acknowledgement("10.0.0.1")
    assert body["node_rank"] == 0 and body["address"] == "10.0.0.1"
    with socket.socket() as s:
        s.bind(("", body["port"]))  # free: it binds
    assert Node(1, 2).acknowledgement(None) == {"node_rank": 1}


def test_the_process_gets_torchruns_and_gpufleets_names() -> None:
    env = Rendezvous.of(START, Node(1, 2)).environment(gpus=0)
    assert env == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "NODE_RANK": "1",
        "NNODES": "2",
        "NPROC_PER_NODE": "1",
        "GPUFLEET_NODE_RANK": "1",
        "GPUFLEET_NUM_NODES": "2",
        "GPUFLEET_NODE_ADDRS": "10.0.0.1,10.0.0.2",
    }
    assert Rendezvous.of(START, Node(1, 2)).environment(gpus=8)["NPROC_PER_NODE"] == "8"


def test_a_start_for_another_rank_or_without_addresses_is_refused() -> None:
    with pytest.raises(AgentError, match="usable rendezvous"):
        Rendezvous.of(START, Node(0, 2))
    with pytest.raises(AgentError, match="usable rendezvous"):
        Rendezvous.of({**START, "node_addrs": ["10.0.0.1"]}, Node(1, 2))


async def test_waiting_acknowledges_again_until_the_start_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gang, "ACK_AGAIN_S", 0.01)
    signal, stop, acks = StartSignal(Node(1, 2)), asyncio.Event(), []

    async def ack_again() -> None:
        acks.append(1)
        if len(acks) == 3:
            signal.arrive(START)

    meet = await signal.wait(stop, ack_again)
    assert meet is not None and meet.master_port == 29_500 and len(acks) == 3


async def test_a_stop_ends_the_wait() -> None:
    signal, stop = StartSignal(Node(1, 2)), asyncio.Event()

    async def never() -> None:
        raise AssertionError("stopped: no acknowledgement again")

    stop.set()
    assert await signal.wait(stop, never) is None
