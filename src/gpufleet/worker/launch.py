"""What the worker starts for a job: its argv, and what its environment gains on a gang.

A job with a command runs that command; on a gang (worker/gang.py) its environment gains the
rendezvous, for `torchrun` or `accelerate launch` in the command to read. A SimpleTuner config
(no command) on one node runs `python -m simpletuner.train`, as the released agent does. On a
gang it runs under Accelerate's launcher, as SimpleTuner's multi-node set-up does (its own
CLI runs `accelerate launch`), with accelerate's settings from the rendezvous:

    python -m accelerate.commands.launch --num_machines NNODES --machine_rank NODE_RANK
        --main_process_ip MASTER_ADDR --main_process_port MASTER_PORT
        --num_processes NNODES*NPROC_PER_NODE (--multi_gpu --same_network | --cpu)
        -m simpletuner.train

A node with GPUs gets `--multi_gpu` (accelerate starts one process a GPU through torchrun). A
node without one gets `--cpu`: accelerate then starts one process and leaves its rank to the
launcher of the nodes (mpirun, in accelerate's own multi-CPU set-up), so the worker, which
starts each node's process, gives it RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpufleet.worker.gang import Rendezvous
from gpufleet.worker.job import SIMPLETUNER_COMMAND, JobSpec

ACCELERATE_LAUNCH = (sys.executable, "-m", "accelerate.commands.launch")


@dataclass(frozen=True, slots=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to the job's environment


def launch(spec: JobSpec, meet: Rendezvous | None, gpus: int) -> Launch:
    """How to start `spec` holding `gpus` GPUs; `meet`: its gang's rendezvous, None alone."""
    if meet is None:
        return Launch(spec.argv, MappingProxyType({}))
    env = meet.environment(gpus)
    if not spec.simpletuner:
        return Launch(spec.argv, MappingProxyType(env))
    nodes = len(meet.node_addrs)
    per_node = max(1, gpus)  # as NPROC_PER_NODE
    settings = [
        *("--num_machines", str(nodes), "--machine_rank", str(meet.node_rank)),
        *("--main_process_ip", meet.master_addr, "--main_process_port", str(meet.master_port)),
        *("--num_processes", str(nodes * per_node)),
    ]
    if gpus > 0:
        settings += ["--multi_gpu", "--same_network"]
    else:
        settings.append("--cpu")
        env.update(
            {
                "RANK": str(meet.node_rank),
                "WORLD_SIZE": str(nodes),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
            }
        )
    # SIMPLETUNER_COMMAND[1:] is `-m simpletuner.train`: accelerate's `-m` runs a module too.
    argv = (*ACCELERATE_LAUNCH, *settings, *SIMPLETUNER_COMMAND[1:])
    return Launch(argv, MappingProxyType(env))
