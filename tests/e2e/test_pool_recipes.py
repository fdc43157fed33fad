"""The command-provider recipes of docs/capacity.md (examples/pools/<tool>/) run through the
`command` provider against a stand-in of each tool's command line: a fake `sky`, `runpodctl`,
`vastai` and `kubectl` on PATH that records its arguments (and stdin) and prints what the real
tool prints. Each recipe's launch gives the tool what the docs say and its instance id back;
its list finds its pool's machines only; its terminate stops the one named."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpufleet.domain.pools import CommandProvider as Config
from gpufleet.errors import ProviderError
from gpufleet.server.providers import Launched, WorkerLaunch
from gpufleet.server.providers.command import CommandProvider

RECIPES = Path(__file__).parents[2] / "examples" / "pools"
FOLDERS = {"sky": "skypilot", "runpodctl": "runpod", "vastai": "vastai", "kubectl": "kubernetes"}
TOKEN = "wt_recipe-token-0123456789"
TAG = "0123456789ab"
NAME = f"Burst_1-{TAG}"  # a worker's name: <pool>-<tag>; the pool's name is not lower case
MACHINE = f"gf-burst-1-{TAG}"  # the name the recipes give its machine
# What a tool knows of besides the pool's machine: another pool's, and not gpufleet's at all.
OTHERS = ("gf-burst-1-2-aaaaaaaaaaaa", "notebook-7")
FAKE = """\
import json, os, sys
tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
answers = json.load(open(os.environ["FAKE_ANSWERS"]))[tool]
stdin = "" if sys.stdin.isatty() else sys.stdin.read()
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps({"tool": tool, "argv": args, "stdin": stdin}) + "\\n")
for prefix, answer in answers:
    if args[: len(prefix)] == prefix:
        sys.stdout.write(answer)
        break
"""


@dataclass
class Recipe:
    tool: str
    launch_args: list[str]
    answers: list[tuple[list[str], str]]  # an argv's first words → what the tool prints
    launched: list[list[str]]  # the argvs its launch runs
    instance: str
    terminated: list[str]  # the argv its terminate runs
    token_in_argv: bool = False  # documented: the tool takes environments as arguments only
    stdin_has: list[str] = field(default_factory=list)


RECIPE_CASES = [
    Recipe(
        tool="sky",
        launch_args=["--gpus", "H100:1", "--use-spot"],
        answers=[
            (["launch"], f"Launching a new cluster '{MACHINE}'.\nJob submitted, ID: 1\n"),
            (
                ["status"],
                "Clusters\nNAME  LAUNCHED  RESOURCES  STATUS  AUTOSTOP  COMMAND\n"
                + "".join(
                    f"{n}  1 min ago  1x AWS(p5.48xlarge)  UP  -  sky launch ...\n"
                    for n in (MACHINE, *OTHERS)
                ),
            ),
            (["down"], f"Terminating cluster {MACHINE}...done.\n"),
        ],
        launched=[
            [
                *("launch", "--yes", "--detach-run", "--down", "--cluster", MACHINE),
                *("--env", "GPUFLEET_ORCHESTRATOR_URL", "--env", "GPUFLEET_WORKER_TOKEN"),
                *("--env", "GPUFLEET_WORKER_NAME", "--env", "GPUFLEET_WORKER_PERSISTENT"),
                *("--env", "GPUFLEET_POOL", "--gpus", "H100:1", "--use-spot"),
                "pip install gpufleet && gpufleet worker",
            ]
        ],
        instance=MACHINE,
        terminated=["down", "--yes", MACHINE],
    ),
    Recipe(
        tool="runpodctl",
        launch_args=["--gpuType", "NVIDIA GeForce RTX 4090"],
        answers=[
            (["create", "pod"], 'pod "xedezhzb9la3ye" created for $0.690 / hr\n'),
            (
                ["get", "pod"],
                "ID\tNAME\tGPU\tIMAGE NAME\tSTATUS\n"
                f"xedezhzb9la3ye\t{MACHINE}\t1 RTX 4090\trunpod/pytorch:2.4.0\tRUNNING\n"
                f"aaaaaaaaaaaaaa\t{OTHERS[0]}\t1 RTX 4090\trunpod/pytorch:2.4.0\tRUNNING\n"
                f"bbbbbbbbbbbbbb\t{OTHERS[1]}\t1 RTX A5000\trunpod/pytorch:2.4.0\tEXITED\n",
            ),
            (["remove", "pod"], 'pod "xedezhzb9la3ye" removed\n'),
        ],
        launched=[
            [
                *("create", "pod", "--name", MACHINE),
                *("--env", "GPUFLEET_ORCHESTRATOR_URL=http://fleet.example:8001"),
                *("--env", f"GPUFLEET_WORKER_TOKEN={TOKEN}"),
                *("--env", f"GPUFLEET_WORKER_NAME={NAME}"),
                *("--env", "GPUFLEET_WORKER_PERSISTENT=0", "--env", "GPUFLEET_POOL=Burst_1"),
                *("--args", "bash -c 'pip install gpufleet && gpufleet worker'"),
                *("--gpuType", "NVIDIA GeForce RTX 4090"),
            ]
        ],
        instance="xedezhzb9la3ye",
        terminated=["remove", "pod", "xedezhzb9la3ye"],
        token_in_argv=True,
    ),
    Recipe(
        tool="vastai",
        launch_args=["gpu_name=RTX_4090 num_gpus=1", "--image", "pytorch/pytorch", "--disk", "40"],
        answers=[
            (["search", "offers"], json.dumps([{"id": 4242, "dph_total": 0.31}, {"id": 7}])),
            (["create", "instance"], '{"success": true, "new_contract": 7835610}\n'),
            (
                ["show", "instances"],
                json.dumps(
                    [
                        {"id": 7835610, "label": MACHINE, "actual_status": "running"},
                        {"id": 1, "label": OTHERS[0]},
                        {"id": 2, "label": None},
                    ]
                ),
            ),
            (["destroy", "instance"], "destroying instance 7835610.\n"),
        ],
        launched=[
            [
                *("search", "offers", "gpu_name=RTX_4090 num_gpus=1 rentable=true"),
                *("-o", "dph_total", "--raw"),
            ],
            [
                *("create", "instance", "4242", "--label", MACHINE, "--raw", "--env"),
                f"-e GPUFLEET_ORCHESTRATOR_URL=http://fleet.example:8001 "
                f"-e GPUFLEET_WORKER_TOKEN={TOKEN} -e GPUFLEET_WORKER_NAME={NAME} "
                "-e GPUFLEET_WORKER_PERSISTENT=0 -e GPUFLEET_POOL=Burst_1",
                *("--onstart-cmd", "pip install gpufleet && gpufleet worker"),
                *("--image", "pytorch/pytorch", "--disk", "40"),
            ],
        ],
        instance="7835610",
        terminated=["destroy", "instance", "7835610"],
        token_in_argv=True,
    ),
    Recipe(
        tool="kubectl",
        launch_args=["nvcr.io/nvidia/pytorch:24.08-py3", "2"],
        answers=[
            (["apply"], f"secret/{MACHINE} created\npod/{MACHINE} created\n"),
            (
                ["get", "pods"],
                "".join(f"pod/{n}\n" for n in (MACHINE, *OTHERS)),
            ),
            (["delete"], f'pod "{MACHINE}" deleted\nsecret "{MACHINE}" deleted\n'),
        ],
        launched=[["apply", "-f", "-"]],
        instance=MACHINE,
        terminated=["delete", "pod,secret", MACHINE, "--ignore-not-found", "--wait=false"],
        stdin_has=[
            f"name: {MACHINE}",
            f'token: "{TOKEN}"',
            'image: "nvcr.io/nvidia/pytorch:24.08-py3"',
            'limits: {nvidia.com/gpu: "2"}',
            f'{{name: GPUFLEET_WORKER_NAME, value: "{NAME}"}}',
            'command: ["sh", "-c", "pip install gpufleet && exec gpufleet worker"]',
        ],
    ),
]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake tools on PATH, their answers read from a file; what they were called with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answers = {r.tool: r.answers for r in RECIPE_CASES}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    for recipe in RECIPE_CASES:
        fake = bin_dir / recipe.tool
        fake.write_text(f"#!{sys.executable}\n" + FAKE)
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ANSWERS", str(tmp_path / "answers.json"))
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.jsonl"))
    return tmp_path / "calls.jsonl"


def called(log: Path) -> list[dict[str, Any]]:
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def provider_of(recipe: Recipe) -> CommandProvider:
    folder = RECIPES / FOLDERS[recipe.tool]
    config = Config(
        (str(folder / "launch.sh"), *recipe.launch_args),
        (str(folder / "terminate.sh"),),
        (str(folder / "list.sh"),),
    )
    return CommandProvider(config, "Burst_1", timeout_s=30)


@pytest.mark.parametrize("recipe", RECIPE_CASES, ids=lambda r: r.tool)
def test_a_recipe_launches_lists_and_terminates_through_its_tool(
    recipe: Recipe, calls: Path, tmp_path: Path
) -> None:
    provider = provider_of(recipe)
    spec = WorkerLaunch("http://fleet.example:8001", TOKEN, NAME, False, "Burst_1", tmp_path / "w")

    launched = provider.launch(spec)
    assert isinstance(launched, Launched) and launched.instance_id == recipe.instance
    made = called(calls)
    assert [c["tool"] for c in made] == [recipe.tool] * len(recipe.launched)
    assert [c["argv"] for c in made] == recipe.launched
    assert any(TOKEN in " ".join(c["argv"]) for c in made) is recipe.token_in_argv
    for line in recipe.stdin_has:
        assert line in made[-1]["stdin"], made[-1]["stdin"]
    assert TOKEN not in launched.stderr  # what the tool said is kept, never the token

    assert provider.list() == [recipe.instance]  # not another pool's, nor one of no pool
    called(calls)
    provider.terminate(recipe.instance)
    assert [c["argv"] for c in called(calls)] == [recipe.terminated]


def test_a_terminate_that_fails_on_a_machine_still_listed_fails(
    calls: Path, tmp_path: Path
) -> None:
    recipe = RECIPE_CASES[0]
    failing = tmp_path / "bin" / "sky"
    failing.write_text(
        failing.read_text()
        + textwrap.dedent("""\
        if args[0] == "down":
            print("sky.exceptions.ClusterNotUpError: cloud API unreachable", file=sys.stderr)
            sys.exit(1)
        """)
    )
    with pytest.raises(ProviderError) as refused:
        provider_of(recipe).terminate(MACHINE)  # still listed: not gone
    assert "cloud API unreachable" in refused.value.stderr
    provider_of(recipe).terminate("gf-burst-1-ffffffffffff")  # not listed: gone, no error
