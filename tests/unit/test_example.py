"""The example training job really learns, and says which backend it used."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gpufleet.examples import train


def test_the_numpy_backend_learns_a_separable_problem(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert train.main(["--steps", "150", "--backend", "numpy", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["backend"] == "numpy"
    assert result["accuracy"] >= 0.95
    assert result["loss"] < result["initial_loss"] / 3


def test_a_model_that_does_not_reach_the_accuracy_floor_fails_the_job(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert (
        train.main(
            [
                "--steps",
                "1",
                "--lr",
                "0.0001",
                "--backend",
                "numpy",
                "--min-accuracy",
                "0.999",
                "--output",
                str(out),
            ]
        )
        == 1
    )


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_asking_for_torch_without_it_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="PyTorch is not installed"):
        train.main(["--backend", "torch", "--output", str(tmp_path / "r.json")])
