import json
import math
from pathlib import Path

import pytest

from gpufleet.progress import PROGRESS_FILE_ENV, report


class Scalar:
    """Stands in for a NumPy/PyTorch scalar: a number behind `.item()`."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def test_report_appends_one_json_line_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target = tmp_path / "progress.jsonl"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(target))

    report(step=1, total=10, loss=0.5)
    report(step=2, total=10, loss=0.25, lr=Scalar(0.001))

    lines = target.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "total": 10, "metrics": {"loss": 0.5}},
        {"step": 2, "total": 10, "metrics": {"loss": 0.25, "lr": 0.001}},
    ]


def test_report_without_the_variable_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(PROGRESS_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    report(step=1, total=2, loss=1.0)

    assert list(tmp_path.iterdir()) == []


def test_report_turns_nan_into_null_and_keeps_total_optional(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    target = tmp_path / "p.jsonl"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(target))

    report(step=3, loss=math.nan, grad=[Scalar(1.0), math.inf], note="warmup")

    assert json.loads(target.read_text()) == {
        "step": 3,
        "total": None,
        "metrics": {"loss": None, "grad": [1.0, None], "note": "warmup"},
    }


def test_on_checkpoint_signal_handles_the_named_signal_and_tells_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    from gpufleet.progress import on_checkpoint_signal

    target = tmp_path / "progress.jsonl"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(target))
    monkeypatch.setenv("GPUFLEET_CHECKPOINT_SIGNAL", "USR2")
    calls: list[str] = []
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        assert on_checkpoint_signal(lambda: calls.append("asked")) is signal.SIGUSR2
        os.kill(os.getpid(), signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert calls == ["asked"]
    assert [json.loads(line) for line in target.read_text().splitlines()] == [
        {"checkpoint_signal": True}
    ]


@pytest.mark.parametrize("name", ["SIGNOPE", "9999", "USR1; rm -rf"])
def test_a_checkpoint_signal_that_names_no_signal_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from gpufleet.progress import checkpoint_signal

    monkeypatch.setenv("GPUFLEET_CHECKPOINT_SIGNAL", name)
    with pytest.raises(ValueError, match="names no signal"):
        checkpoint_signal()


def test_checkpoint_outside_a_worker_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.progress import checkpoint

    monkeypatch.delenv(PROGRESS_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    checkpoint("output/checkpoint-1", step=1)
    assert list(tmp_path.iterdir()) == []
