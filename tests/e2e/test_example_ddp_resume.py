"""The example's `--ddp` checkpoints (#35): two ranks under `torchrun` on loopback write the
same steps, each its own replica under `rank-<RANK>/`, and a run resumed from one ends with
the weights of the uninterrupted run (docs/jobs.md, Multi-node jobs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.torch_check import needs_torch

needs_torch()

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
TRAIN = [
    *("-m", "gpufleet.examples.train", "--samples", "60", "--steps", "30", "--seed", "4"),
    *("--ddp", "--checkpoint-every", "10"),
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def torchrun(folder: Path, **env: str) -> dict[str, object]:
    """Two ranks on this machine (`--standalone`: a free port on loopback); result.json,
    with what they printed under `output`."""
    argv = [TORCHRUN, "--standalone", "--nnodes", "1", "--nproc-per-node", "2", *TRAIN]
    done = subprocess.run(
        argv, cwd=folder, env={**ENV, **env}, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result: dict[str, object] = json.loads((folder / "result.json").read_text())
    return {**result, "output": done.stdout}


def test_a_resumed_ddp_run_ends_with_the_uninterrupted_runs_weights(tmp_path: Path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    whole.mkdir()
    resumed.mkdir()
    uninterrupted = torchrun(whole)
    assert uninterrupted["world_size"] == 2
    for step in (10, 20):
        checkpoint = whole / "output" / f"checkpoint-{step}"
        assert sorted(p.name for p in checkpoint.iterdir()) == ["rank-0", "rank-1"]
        for rank in (0, 1):
            state = json.loads((checkpoint / f"rank-{rank}" / "state.json").read_text())
            assert state["step"] == step
    assert not list((whole / "output").glob(".checkpoint-*"))  # none left half-written

    # The worker puts the checkpoint back where the job wrote it and names it.
    shutil.copytree(whole / "output" / "checkpoint-10", resumed / "output" / "checkpoint-10")
    folder = str(resumed / "output" / "checkpoint-10")
    after = torchrun(resumed, GPUFLEET_RESUME_FROM=folder)
    assert str(after["output"]).count(f"resumed from {folder} at step 10") == 2  # both ranks
    assert after["weights_sha256"] == uninterrupted["weights_sha256"]
    assert (after["weights"], after["bias"]) == (uninterrupted["weights"], uninterrupted["bias"])
    assert sorted(p.name for p in (resumed / "output").iterdir()) == [
        "checkpoint-10",
        "checkpoint-20",
    ]
