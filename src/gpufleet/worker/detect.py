"""What this machine offers: GPUs, CPU cores and memory, as reported at registration.

Probes run in order and the first that finds an accelerator wins: NVML (the `pynvml` module of
nvidia-ml-py), `nvidia-smi`, `rocm-smi`, Apple MPS; otherwise the machine is CPU-only. Each
probe takes its boundary as a parameter (the NVML module, the command runner, the platform) so
tests drive the real parsing with fakes instead of skipping it.
"""

from __future__ import annotations

import json
import logging
import platform
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import psutil  # type: ignore[import-untyped]

from gpufleet.errors import ConfigurationError

log = logging.getLogger(__name__)

GIB = 1024**3

# Runs an argv and returns its stdout, or None when the tool is missing or fails.
CommandRunner = Callable[[Sequence[str]], str | None]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_gb: float | None
    uuid: str | None = None

    def as_wire(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "memory_gb": self.memory_gb,
            "uuid": self.uuid,
        }


@dataclass(frozen=True)
class Capabilities:
    accelerator_type: str  # "cuda", "rocm", "mps" or "cpu"
    gpus: tuple[Gpu, ...]
    cpu_cores: int
    ram_gb: float
    driver_version: str | None = None
    cuda_version: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_name(self) -> str | None:
        return self.gpus[0].name if self.gpus else None

    @property
    def gpu_vram_gb(self) -> float | None:
        return self.gpus[0].memory_gb if self.gpus else None

    def only(self, indices: Sequence[int] | None) -> Capabilities:
        """The same machine offering only the GPUs at `indices` (all of them when None)."""
        if indices is None:
            return self
        known = {gpu.index: gpu for gpu in self.gpus}
        unknown = [index for index in indices if index not in known]
        if unknown:
            have = ",".join(str(i) for i in known) or "none"
            raise ConfigurationError(
                f"--gpus names GPU {','.join(map(str, unknown))} but this machine has GPUs "
                f"{have}: pass indices from that list"
            )
        chosen = tuple(known[index] for index in dict.fromkeys(indices))
        return replace(self, gpus=chosen)

    def as_wire(self) -> dict[str, Any]:
        """The capability fields of the register body (docs/protocol.md)."""
        return {
            "gpu_count": self.gpu_count,
            "gpu_name": self.gpu_name,
            "gpu_vram_gb": self.gpu_vram_gb,
            "accelerator_type": self.accelerator_type,
            "gpus": [gpu.as_wire() for gpu in self.gpus],
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "cpu_cores": self.cpu_cores,
            "ram_gb": self.ram_gb,
        }


class Nvml(Protocol):
    """The part of `pynvml` detection uses."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...


@dataclass(frozen=True)
class _Accelerators:
    kind: str
    gpus: tuple[Gpu, ...]
    driver_version: str | None = None
    cuda_version: str | None = None


def detect(
    *,
    nvml: Nvml | None = None,
    run: CommandRunner | None = None,
    system: str | None = None,
    machine: str | None = None,
) -> Capabilities:
    """Probe this machine. Leave the parameters out to probe the real one."""
    runner = run or run_command
    found = (
        probe_nvml(nvml if nvml is not None else load_pynvml())
        or probe_nvidia_smi(runner)
        or probe_rocm_smi(runner)
        or probe_mps(runner, system or platform.system(), machine or platform.machine())
    )
    memory = psutil.virtual_memory().total
    accelerators = found or _Accelerators(kind="cpu", gpus=())
    return Capabilities(
        accelerator_type=accelerators.kind,
        gpus=accelerators.gpus,
        cpu_cores=psutil.cpu_count(logical=True) or 1,
        ram_gb=round(memory / GIB, 1),
        driver_version=accelerators.driver_version,
        cuda_version=accelerators.cuda_version,
    )


def run_command(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("%s: %s", argv[0], exc)
        return None
    if done.returncode != 0:
        log.debug("%s exited with %s: %s", argv[0], done.returncode, done.stderr.strip())
        return None
    return done.stdout


def load_pynvml() -> Nvml | None:
    try:
        import pynvml
    except ImportError:
        return None
    module: Nvml = pynvml
    return module


def probe_nvml(nvml: Nvml | None) -> _Accelerators | None:
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError when there is no driver: the usual case off-GPU
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_gb=round(int(memory.total) / GIB, 1),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                )
            )
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_from_int(nvml.nvmlSystemGetCudaDriverVersion())
    except Exception as exc:
        log.warning("NVML answered but could not list GPUs (%s); trying nvidia-smi", exc)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown: %s", exc)
    if not gpus:
        return None
    return _Accelerators("cuda", tuple(gpus), driver, cuda)


_SMI_QUERY = "index,name,memory.total,uuid,driver_version"
_CUDA_IN_BANNER = re.compile(r"CUDA Version:\s*([0-9.]+)")


def probe_nvidia_smi(run: CommandRunner) -> _Accelerators | None:
    out = run(["nvidia-smi", f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader,nounits"])
    if not out:
        return None
    gpus, drivers = [], []
    for row in out.splitlines():
        cells = [cell.strip() for cell in row.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        gpus.append(Gpu(int(cells[0]), cells[1], _gb_from_mib(cells[2]), _known(cells[3])))
        drivers.append(cells[4])
    if not gpus:
        return None
    banner = run(["nvidia-smi"]) or ""
    cuda = _CUDA_IN_BANNER.search(banner)
    return _Accelerators("cuda", tuple(gpus), _known(drivers[0]), cuda.group(1) if cuda else None)


def probe_rocm_smi(run: CommandRunner) -> _Accelerators | None:
    out = run(
        ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuniqueid", "--json"]
    )
    if not out:
        return None
    try:
        cards = json.loads(out)
    except ValueError:
        log.debug("rocm-smi printed something that is not JSON: %.200s", out)
        return None
    gpus = []
    for key, card in cards.items():
        index = re.fullmatch(r"card(\d+)", key)
        if index is None or not isinstance(card, dict):
            continue
        name = (
            card.get("Card Series")
            or card.get("Card series")
            or card.get("Device Name")
            or card.get("Card model")
            or "AMD GPU"
        )
        vram = str(card.get("VRAM Total Memory (B)") or "")
        gpus.append(
            Gpu(
                index=int(index.group(1)),
                name=str(name),
                memory_gb=round(int(vram) / GIB, 1) if vram.isdigit() else None,
                uuid=_known(str(card.get("Unique ID", ""))),
            )
        )
    if not gpus:
        return None
    driver = None
    versions = run(["rocm-smi", "--showdriverversion", "--json"])
    if versions:
        try:
            driver = json.loads(versions).get("system", {}).get("Driver version")
        except (ValueError, AttributeError):
            driver = None
    return _Accelerators("rocm", tuple(sorted(gpus, key=lambda g: g.index)), driver)


def probe_mps(run: CommandRunner, system: str, machine: str) -> _Accelerators | None:
    if system != "Darwin" or machine != "arm64":
        return None
    brand = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or "Apple Silicon"
    # Unified memory: the GPU can use (most of) the machine's RAM.
    memory = round(psutil.virtual_memory().total / GIB, 1)
    return _Accelerators("mps", (Gpu(index=0, name=brand, memory_gb=memory),))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_from_int(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


def _gb_from_mib(cell: str) -> float | None:
    try:
        return round(float(cell) / 1024, 1)
    except ValueError:
        return None


def _known(cell: str) -> str | None:
    return None if cell in ("", "N/A", "[N/A]", "[Not Supported]") else cell
