"""The example's data-parallel side (`train.py --ddp`): joining the gloo process group, and
the collectives that keep the ranks' checkpoints in step (docs/jobs.md, Multi-node jobs).

Whether to write a checkpoint at a step is agreed by a collective (any rank due or asked: all
of them), so every rank writes the same step. Each writes its own replica into
`checkpoint-<step>/rank-<RANK>/` of its node's folder; after a barrier the node's local
rank 0 renames the folder into place and announces it to the worker, which stores it as the
node's part of the checkpoint. A resumed rank loads its `rank-<RANK>/`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet import progress

# How long a rank whose peer is gone waits, under a worker, for the attempt to be ended
# (the peer's worker found lost or stopped: this process is stopped, the job requeued).
PEER_GONE_WAIT_S = 300.0


def start(samples: int) -> tuple[Any, int, int, int]:
    """torch, rank, world size and local rank, in the gloo process group torchrun set up (or
    a gpufleet multi-node job's one process a node: the node's rank)."""
    if "RANK" not in os.environ and "GPUFLEET_NUM_NODES" in os.environ:
        os.environ["RANK"] = os.environ.get("GPUFLEET_NODE_RANK", "0")
        os.environ["WORLD_SIZE"] = os.environ["GPUFLEET_NUM_NODES"]
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise SystemExit(f"--ddp: start it with torchrun ({', '.join(missing)} not set)")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if samples % world_size:
        raise SystemExit(f"--ddp: --samples {samples} does not divide over {world_size} ranks")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise SystemExit("--ddp: PyTorch is not installed") from None
    dist.init_process_group("gloo")
    return torch, rank, world_size, int(os.environ.get("LOCAL_RANK", "0"))


def agreed(torch: Any, want: bool) -> bool:
    """Whether every rank checkpoints now: any rank wants to."""
    flag = torch.tensor([1 if want else 0])
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item())


def same_step(torch: Any, step: int) -> None:
    """Every rank resumed from the same step, or none goes on."""
    steps = torch.tensor([step, -step])
    torch.distributed.all_reduce(steps, op=torch.distributed.ReduceOp.MAX)
    if int(steps[0]) != -int(steps[1]):
        raise SystemExit(
            f"the ranks resumed from different steps ({-int(steps[1])} to {int(steps[0])}): "
            "resume every node from one checkpoint"
        )


def save(
    torch: Any, folder: Path, step: int, rank: int, local_rank: int, write: Callable[[Path], None]
) -> Path:
    """This rank's replica (`write` into the folder it is given) into
    `folder/checkpoint-<step>/rank-<rank>/`, the node's folder renamed into place and
    announced once every rank wrote its own."""
    target = folder / f"checkpoint-{step}"
    staging = folder / f".checkpoint-{step}.partial"
    write(staging / f"rank-{rank}")
    torch.distributed.barrier()
    if local_rank == 0:
        staging.replace(target)
        progress.checkpoint(target, step=step)
    return target


def peer_gone(exc: Exception) -> int:
    """A collective failed: another rank's process or machine is most likely gone. Under a
    gpufleet worker, wait to be stopped: the orchestrator ends the attempt (the other node is
    lost or stopped) and requeues the job, which resumes from the last checkpoint every node
    completed; exiting now would report this node's failure, and fail the job. Else, or if
    no stop comes, fail."""
    print(f"--ddp: a collective failed ({exc})", file=sys.stderr, flush=True)
    if os.environ.get(progress.PROGRESS_FILE_ENV):
        print("--ddp: waiting for the worker to end this attempt", file=sys.stderr, flush=True)
        time.sleep(PEER_GONE_WAIT_S)
    return 1
