"""GPU detection: every probe parses real-looking output from a fake tool, none is skipped."""

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.errors import ConfigurationError
from gpufleet.worker.detect import Capabilities, Gpu, detect, run_command

SMI_QUERY_OUTPUT = """\
0, NVIDIA A100-SXM4-80GB, 81920, GPU-1111aaaa-0000-0000-0000-000000000000, 550.54.15
1, NVIDIA A100-SXM4-80GB, 81920, GPU-2222bbbb-0000-0000-0000-000000000000, 550.54.15
"""
SMI_BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
+-----------------------------------------------------------------------------------------+
"""
ROCM_CARDS = {
    "card0": {
        "Card Series": "AMD Instinct MI250X",
        "Card Vendor": "AMD",
        "VRAM Total Memory (B)": "68702699520",
        "VRAM Total Used Memory (B)": "10",
        "Unique ID": "0x18f68e602b8a790f",
    },
    "card1": {
        "Card Series": "AMD Instinct MI250X",
        "Card Vendor": "AMD",
        "VRAM Total Memory (B)": "68702699520",
        "Unique ID": "0x28f68e602b8a790f",
    },
}


class FakeNvml:
    """A working stand-in for pynvml with two GPUs."""

    class NVMLError(Exception):
        pass

    def __init__(
        self,
        *,
        names: Sequence[str] = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        fail_init: bool = False,
    ) -> None:
        self.names = names
        self.fail_init = fail_init
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=85_520_809_984, free=0, used=0)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040


NO_NVML = FakeNvml(fail_init=True)


def put_tool_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path, name: str, script: str) -> None:
    tool = folder / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with only a folder of fakes and the basics a shell script needs."""
    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return tools


def test_nvml_is_read_first_with_names_memory_uuids_and_versions():
    nvml = FakeNvml()
    caps = detect(nvml=nvml, run=lambda argv: pytest.fail(f"ran {argv} although NVML worked"))

    assert caps.accelerator_type == "cuda"
    assert caps.gpu_count == 2
    assert caps.gpu_name == "NVIDIA H100 80GB HBM3"
    assert caps.gpu_vram_gb == 79.6
    assert caps.gpus[1] == Gpu(
        index=1, name="NVIDIA H100 80GB HBM3", memory_gb=79.6, uuid="GPU-00000001"
    )
    assert (caps.driver_version, caps.cuda_version) == ("550.90.07", "12.4")
    assert nvml.shut_down


def test_nvidia_smi_on_path_is_parsed_when_nvml_is_missing(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
):
    put_tool_on_path(
        monkeypatch,
        bare_path,
        "nvidia-smi",
        f"""
case "$1" in
  --query-gpu=*) cat <<'OUT'
{SMI_QUERY_OUTPUT}OUT
  ;;
  *) cat <<'OUT'
{SMI_BANNER}OUT
  ;;
esac
""",
    )
    caps = detect(nvml=NO_NVML)

    assert caps.accelerator_type == "cuda"
    assert [gpu.index for gpu in caps.gpus] == [0, 1]
    assert caps.gpus[0] == Gpu(
        0, "NVIDIA A100-SXM4-80GB", 80.0, "GPU-1111aaaa-0000-0000-0000-000000000000"
    )
    assert caps.gpu_vram_gb == 80.0
    assert caps.driver_version == "550.54.15"
    assert caps.cuda_version == "12.4"


def test_a_failing_nvidia_smi_falls_through_to_rocm_smi(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
):
    put_tool_on_path(
        monkeypatch,
        bare_path,
        "nvidia-smi",
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate" >&2; exit 9\n',
    )
    driver = json.dumps({"system": {"Driver version": "6.7.0"}})
    put_tool_on_path(
        monkeypatch,
        bare_path,
        "rocm-smi",
        f"""
case "$*" in
  *--showdriverversion*) echo '{driver}' ;;
  *) echo '{json.dumps(ROCM_CARDS)}' ;;
esac
""",
    )
    caps = detect(nvml=NO_NVML)

    assert caps.accelerator_type == "rocm"
    assert caps.gpu_count == 2
    assert caps.gpus[0] == Gpu(0, "AMD Instinct MI250X", 64.0, "0x18f68e602b8a790f")
    assert caps.driver_version == "6.7.0"


def test_apple_silicon_reports_one_mps_device_with_the_chip_name():
    def fake_run(argv: Sequence[str]) -> str | None:
        return "Apple M2 Max\n" if argv[0] == "sysctl" else None

    caps = detect(nvml=NO_NVML, run=fake_run, system="Darwin", machine="arm64")

    assert caps.accelerator_type == "mps"
    assert caps.gpu_count == 1
    assert caps.gpu_name == "Apple M2 Max"
    assert caps.gpu_vram_gb == caps.ram_gb  # unified memory


def test_without_any_accelerator_the_machine_is_cpu_only(bare_path: Path):
    caps = detect(nvml=NO_NVML, system="Linux", machine="x86_64")

    assert caps.accelerator_type == "cpu"
    assert caps.gpu_count == 0
    assert caps.gpu_name is None
    assert caps.cpu_cores >= 1
    assert caps.ram_gb > 0
    wire = caps.as_wire()
    assert wire["gpus"] == [] and wire["accelerator_type"] == "cpu"


def test_gpus_option_offers_only_the_named_indices():
    caps = detect(nvml=FakeNvml(names=("A", "B", "C")))

    offered = caps.only([2, 0])

    assert [(gpu.index, gpu.name) for gpu in offered.gpus] == [(2, "C"), (0, "A")]
    assert offered.as_wire()["gpu_count"] == 2


def test_gpus_option_naming_an_absent_gpu_is_a_configuration_error():
    caps = Capabilities(
        accelerator_type="cuda", gpus=(Gpu(0, "A", 16.0),), cpu_cores=4, ram_gb=32.0
    )

    with pytest.raises(ConfigurationError, match="GPU 3 but this machine has GPUs 0"):
        caps.only([0, 3])


def test_run_command_returns_none_for_a_missing_tool(bare_path: Path):
    assert run_command(["definitely-not-a-tool-gpufleet"]) is None
