"""What the worker starts for a job (worker/launch.py): a command as given, a SimpleTuner config
alone as the released agent does, and on a gang under Accelerate's launcher with the
rendezvous as accelerate's settings."""

from __future__ import annotations

import sys

import pytest

from gpufleet.worker.gang import Node, Rendezvous
from gpufleet.worker.job import SIMPLETUNER_COMMAND, JobSpec
from gpufleet.worker.launch import ACCELERATE_LAUNCH, launch
from gpufleet.worker.offer import Offer

START = {
    "node_rank": 1,
    "master_addr": "10.0.0.1",
    "master_port": 29_500,
    "node_addrs": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
}
MEET = Rendezvous.of(START, Node(1, 3))


def spec(**event: object) -> JobSpec:
    return JobSpec.from_offer(Offer.from_event({"job_id": "j_1", "attempt_id": "a_1", **event}))


def flags(argv: tuple[str, ...]) -> dict[str, str | None]:
    """accelerate's options in `argv` (after the launcher, before `-m module`): name → value."""
    assert argv[: len(ACCELERATE_LAUNCH)] == ACCELERATE_LAUNCH
    rest = list(argv[len(ACCELERATE_LAUNCH) : -2])
    seen: dict[str, str | None] = {}
    while rest:
        name = rest.pop(0)
        takes_value = rest and not rest[0].startswith("--")
        seen[name] = rest.pop(0) if takes_value else None
    return seen


def test_a_simpletuner_config_alone_runs_the_trainer_as_the_released_agent_does() -> None:
    start = launch(spec(config={}), None, gpus=2)
    assert start.argv == (sys.executable, "-m", "simpletuner.train") == SIMPLETUNER_COMMAND
    assert dict(start.env) == {}


def test_a_command_runs_as_given_alone_and_on_a_gang_with_the_rendezvous() -> None:
    job = spec(command=["torchrun", "train.py"])
    assert launch(job, None, gpus=1).argv == ("torchrun", "train.py")
    start = launch(job, MEET, gpus=4)
    assert start.argv == ("torchrun", "train.py")
    assert dict(start.env) == MEET.environment(4)
    assert "RANK" not in start.env  # torchrun gives each process its rank


def test_a_simpletuner_config_on_gpu_nodes_runs_under_accelerate_in_multi_gpu_mode() -> None:
    start = launch(spec(config={}), MEET, gpus=4)
    assert start.argv[-2:] == ("-m", "simpletuner.train")
    assert flags(start.argv) == {
        "--num_machines": "3",
        "--machine_rank": "1",
        "--main_process_ip": "10.0.0.1",
        "--main_process_port": "29500",
        "--num_processes": "12",  # every GPU of every node
        "--multi_gpu": None,
        "--same_network": None,
    }
    assert dict(start.env) == MEET.environment(4)  # torchrun, under accelerate, ranks them


def test_a_simpletuner_config_on_cpu_nodes_runs_one_process_a_node_with_its_rank() -> None:
    start = launch(spec(config={}), MEET, gpus=0)
    assert flags(start.argv) == {
        "--num_machines": "3",
        "--machine_rank": "1",
        "--main_process_ip": "10.0.0.1",
        "--main_process_port": "29500",
        "--num_processes": "3",
        "--cpu": None,
    }
    assert dict(start.env) == {
        **MEET.environment(0),
        "RANK": "1",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


@pytest.mark.parametrize("gpus", [0, 2])
def test_accelerates_own_parser_reads_the_settings_as_meant(gpus: int) -> None:
    parser = pytest.importorskip("accelerate.commands.launch").launch_command_parser()
    argv = launch(spec(config={}), MEET, gpus=gpus).argv
    args = parser.parse_args(list(argv[len(ACCELERATE_LAUNCH) :]))
    assert (args.num_machines, args.machine_rank) == (3, 1)
    assert (args.main_process_ip, args.main_process_port) == ("10.0.0.1", 29_500)
    assert args.num_processes == 3 * max(1, gpus)
    assert (args.multi_gpu, args.cpu) == (gpus > 0, gpus == 0)
    assert args.module and args.training_script == "simpletuner.train"
    assert args.training_script_args == []
