"""The example's `--ddp` across machines: one `torchrun` per network namespace, the gloo
rendezvous over the bridge, no gpufleet in between (#35). Every rank ends with the weights of
a one-process run on the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.multinode.conftest import TORCHRUN, TRAIN, TRAIN_ENV
from tests.netns import Network
from tests.torch_check import needs_torch

needs_torch()

PORT = "29500"  # each namespace is a fresh network stack: rank 0's port is free there
ENV = {**os.environ, **TRAIN_ENV}


# Two namespaces: torch's own rendezvous across the bridge, no gpufleet in between; that it
# holds for three nodes through gpufleet is test_gang_ddp's (#32: each run costs 13-15 s).
@pytest.mark.parametrize("nodes", [2])
def test_ranks_in_their_own_namespaces_train_as_one_process_does(
    machines: Callable[[int], Network],
    one_process: dict[str, object],
    tmp_path: Path,
    nodes: int,
) -> None:
    net = machines(nodes)
    master = net.namespaces[0].address
    launched = []
    for rank, machine in enumerate(net.namespaces):
        folder = tmp_path / f"node{rank}"
        folder.mkdir()
        argv = [
            TORCHRUN,
            *("--nnodes", str(nodes), "--node-rank", str(rank), "--nproc-per-node", "1"),
            *("--master-addr", master, "--master-port", PORT),
            *TRAIN,
            "--ddp",
        ]
        # No GLOO_SOCKET_IFNAME: gloo binds to the host name's address, the namespace's own.
        with (folder / "output.log").open("w") as log:
            launched.append(
                machine.start(argv, cwd=folder, env=ENV, stdout=log, stderr=subprocess.STDOUT)
            )
    for rank, process in enumerate(launched):
        log = tmp_path / f"node{rank}" / "output.log"
        assert process.wait(timeout=180) == 0, log.read_text()[-3000:]

    checksum = one_process["weights_sha256"]
    for rank in range(nodes):
        folder = tmp_path / f"node{rank}"
        result = json.loads((folder / "result.json").read_text())
        assert (result["world_size"], result["weights_sha256"]) == (nodes, checksum)
        assert result["accuracy"] >= 0.9
        log = (folder / "output.log").read_text()
        assert f"rank {rank} of {nodes}: weights sha256 {checksum}" in log
