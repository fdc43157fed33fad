"""GPU load for the heartbeat: NVML first, else nvidia-smi, else nothing (and no retries)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.worker.detect import run_command
from gpufleet.worker.gpu_load import UsageSampler
from tests.unit.test_detect import NO_NVML, FakeNvml, bare_path, put_tool_on_path

__all__ = ["bare_path"]  # the fixture, used by name

_GIB = 1024**3


class LoadedNvml(FakeNvml):
    """FakeNvml with load: GPU i is 40·i % busy and uses i+1 GiB."""

    inits = 0

    def nvmlInit(self) -> None:
        super().nvmlInit()
        self.inits += 1

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 * _GIB, free=0, used=(handle + 1) * _GIB)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=40 * handle, memory=0)


SMI_USAGE = "0, 87, 62976, 81920\n1, [N/A], [N/A], 81920\n"


def test_nvml_load_is_read_for_the_offered_gpus_with_nvml_opened_once() -> None:
    nvml = LoadedNvml()
    sampler = UsageSampler([1], nvml=nvml, run=lambda argv: pytest.fail(f"ran {argv}"))

    first, second = sampler.sample(), sampler.sample()

    assert (
        first
        == second
        == [{"index": 1, "utilization_pct": 40.0, "memory_used_gb": 2.0, "memory_total_gb": 80.0}]
    )
    assert nvml.inits == 1


def test_nvidia_smi_load_is_parsed_when_nvml_is_missing(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_tool_on_path(monkeypatch, bare_path, "nvidia-smi", f"cat <<'OUT'\n{SMI_USAGE}OUT\n")
    sampler = UsageSampler([0, 1], nvml=NO_NVML, run=run_command)

    assert sampler.sample() == [
        {"index": 0, "utilization_pct": 87.0, "memory_used_gb": 61.5, "memory_total_gb": 80.0},
        {"index": 1, "utilization_pct": None, "memory_used_gb": None, "memory_total_gb": 80.0},
    ]


def test_without_nvml_or_nvidia_smi_nothing_is_sent_and_no_tool_runs_again() -> None:
    ran: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> str | None:
        ran.append(argv)
        return None

    sampler = UsageSampler([0], nvml=None, run=run, load_nvml=lambda: None)

    assert sampler.sample() is None
    assert sampler.sample() is None
    assert len(ran) == 1


def test_a_cpu_only_machine_samples_nothing() -> None:
    sampler = UsageSampler([], run=lambda argv: pytest.fail(f"ran {argv}"))

    assert sampler.sample() is None
