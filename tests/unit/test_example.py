"""The example training job really learns, and says which backend it used."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.examples import train
from tests.waiting import wait_until


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


def test_asking_for_torch_without_it_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, installed or not
    with pytest.raises(SystemExit, match="PyTorch is not installed"):
        train.main(["--backend", "torch", "--output", str(tmp_path / "r.json")])


def test_the_weights_checksum_ignores_the_last_bits_and_the_sign_of_zero() -> None:
    checksum = train.weights_checksum([1.25, -0.5], 0.0)
    assert train.weights_checksum([1.25000003, -0.49999998], -0.0) == checksum
    assert train.weights_checksum([1.2501, -0.5], 0.0) != checksum
    assert train.weights_checksum([-0.5, 1.25], 0.0) != checksum


def test_ddp_outside_torchrun_says_how_to_start_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match=r"start it with torchrun \(RANK, WORLD_SIZE, MASTER_ADDR"):
        train.main(["--ddp", "--output", str(tmp_path / "r.json")])


def test_ddp_refuses_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        train.main(["--ddp", "--backend", "numpy"])
    assert "--ddp runs on PyTorch" in capsys.readouterr().err


def test_ddp_needs_a_global_batch_that_divides_over_the_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match="--samples 100 does not divide over 3 ranks"):
        train.main(["--ddp", "--samples", "100", "--output", str(tmp_path / "r.json")])


def run_example(folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """The example as a worker runs it: its own process, in its job folder."""
    assert start_example(folder, *args, env=env).wait(timeout=60) == 0


def start_example(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    (folder / "progress.jsonl").touch()
    return subprocess.Popen(
        [sys.executable, "-m", "gpufleet.examples.train", *args],
        cwd=folder,
        env={**os.environ, "GPUFLEET_PROGRESS_FILE": str(folder / "progress.jsonl"), **(env or {})},
        stdout=subprocess.DEVNULL,
    )


def progress_lines(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "progress.jsonl").read_text().splitlines()]


BACKENDS = [
    "numpy",
    pytest.param(
        "torch",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("torch") is None, reason="torch is not installed"
        ),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_killed_after_a_checkpoint_and_resumed_ends_byte_identical(
    tmp_path: Path, backend: str
) -> None:
    args = ["--steps", "120", "--backend", backend, "--seed", "3"]
    whole, first, second = tmp_path / "whole", tmp_path / "first", tmp_path / "second"
    for folder in (whole, first, second):
        folder.mkdir()
    # The unbroken run, beside the first attempt (which mostly sleeps between its steps).
    unbroken = start_example(whole, *args)

    # The first attempt checkpoints every 10 steps (0.5 s in, 5.5 s left): SIGKILLed after one.
    (first / "progress.jsonl").touch()
    env = {**os.environ, "GPUFLEET_PROGRESS_FILE": str(first / "progress.jsonl")}
    slow = [*args, "--checkpoint-every", "10", "--step-delay", "0.05"]
    process = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.examples.train", *slow],
        cwd=first,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    wait_until(
        lambda: any("checkpoint" in line for line in progress_lines(first)),
        timeout=30,
        message="a checkpoint announced",
    )
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (first / "result.json").exists()
    note = next(line for line in progress_lines(first) if "checkpoint" in line)
    assert note == {"checkpoint": "output/checkpoint-10", "step": 10}

    # The second attempt gets the checkpoint in its own folder, as the worker puts it there.
    shutil.copytree(first / "output/checkpoint-10", second / "output/checkpoint-10")
    run_example(second, *args, env={"GPUFLEET_RESUME_FROM": str(second / "output/checkpoint-10")})

    assert unbroken.wait(timeout=60) == 0
    steps = [line["step"] for line in progress_lines(second) if "step" in line and "total" in line]
    assert steps[0] > 10  # it went on, not from the start
    assert (second / "result.json").read_bytes() == (whole / "result.json").read_bytes()
    assert json.loads((whole / "result.json").read_text())["backend"] == backend


def test_resuming_from_another_backend_s_checkpoint_says_which_to_use(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "state.json").write_text('{"step": 5, "backend": "torch", "initial_loss": 1}')
    with pytest.raises(SystemExit, match="resume it with --backend torch"):
        train.load_checkpoint(train.NumpyModel(*train.make_data(10, 2, 0)[:2]), checkpoint)


def test_the_checkpoint_signal_makes_the_job_checkpoint_at_its_next_step(tmp_path: Path) -> None:
    (tmp_path / "progress.jsonl").touch()
    env = {**os.environ, "GPUFLEET_PROGRESS_FILE": str(tmp_path / "progress.jsonl")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpufleet.examples.train",
            "--steps",
            "400",
            "--step-delay",
            "0.02",
            "--backend",
            "numpy",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: {"checkpoint_signal": True} in progress_lines(tmp_path),
            timeout=30,
            message="the job to say it handles the signal",
        )
        process.send_signal(signal.SIGUSR1)

        def checkpointed() -> bool:
            assert process.poll() is None, "SIGUSR1 killed the job"
            return any("checkpoint" in line for line in progress_lines(tmp_path))

        wait_until(checkpointed, timeout=30, message="a checkpoint after the signal")
    finally:
        process.kill()
        process.wait()
    (note,) = [line for line in progress_lines(tmp_path) if "checkpoint" in line]
    folder = tmp_path / "output" / f"checkpoint-{note['step']}"
    assert note["checkpoint"] == f"output/checkpoint-{note['step']}"
    assert sorted(p.name for p in folder.iterdir()) == ["state.json", "weights.npz"]
