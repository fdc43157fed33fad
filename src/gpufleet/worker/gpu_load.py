"""Each offered GPU's load now (utilisation, memory in use), sent with every heartbeat."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.worker.detect import GIB, CommandRunner, Nvml, load_pynvml, run_command

log = logging.getLogger(__name__)

_SMI_USAGE = "index,utilization.gpu,memory.used,memory.total"


class UsageSampler:
    """Each offered GPU's utilisation and memory in use now, as the heartbeat's `gpu_stats`:
    NVML when it answers, else `nvidia-smi`. When neither does, `sample` returns None from
    then on (nothing is sent, and no tool is run again every heartbeat)."""

    def __init__(
        self,
        indices: Sequence[int],
        *,
        nvml: Nvml | None = None,
        run: CommandRunner | None = None,
        load_nvml: Callable[[], Nvml | None] = load_pynvml,
    ) -> None:
        self._indices = tuple(indices)
        self._run = run or run_command
        self._nvml = nvml
        self._load_nvml = load_nvml
        self._source: str | None = None  # "nvml" or "smi" once one answered
        self._dead = not self._indices

    def sample(self) -> list[dict[str, Any]] | None:
        if self._dead:
            return None
        if self._source in (None, "nvml"):
            found = self._from_nvml()
            if found is not None:
                self._source = "nvml"
                return found
        found = self._from_smi()
        if found is not None:
            self._source = "smi"
            return found
        if self._source is None:
            log.info("no GPU load to report: neither NVML nor nvidia-smi answered")
            self._dead = True
        return None

    def _from_nvml(self) -> list[dict[str, Any]] | None:
        if self._source is None:
            self._nvml = self._nvml or self._load_nvml()
            if self._nvml is None:
                return None
            try:
                self._nvml.nvmlInit()  # kept open: a heartbeat reads it again and again
            except Exception as exc:
                log.debug("NVML unavailable for GPU load: %s", exc)
                self._nvml = None
                return None
        nvml = self._nvml
        if nvml is None:
            return None
        try:
            out = []
            for index in self._indices:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                out.append(
                    _stat(index, float(rates.gpu), int(memory.used) / GIB, memory.total / GIB)
                )
            return out
        except Exception as exc:
            log.debug("NVML could not read GPU load: %s", exc)
            return None

    def _from_smi(self) -> list[dict[str, Any]] | None:
        out = self._run(
            ["nvidia-smi", f"--query-gpu={_SMI_USAGE}", "--format=csv,noheader,nounits"]
        )
        if not out:
            return None
        rows: dict[int, dict[str, Any]] = {}
        for row in out.splitlines():
            cells = [cell.strip() for cell in row.split(",")]
            if len(cells) < 4 or not cells[0].isdigit():
                continue
            used, total = _number(cells[2]), _number(cells[3])
            rows[int(cells[0])] = _stat(
                int(cells[0]),
                _number(cells[1]),
                None if used is None else used / 1024,
                None if total is None else total / 1024,
            )
        found = [rows[index] for index in self._indices if index in rows]
        return found or None


def _stat(
    index: int, utilization: float | None, used_gb: float | None, total_gb: float | None
) -> dict[str, Any]:
    """One GPU's load as the heartbeat carries it (server: schemas.agent.GpuStatIn)."""
    return {
        "index": index,
        "utilization_pct": None if utilization is None else min(100.0, max(0.0, utilization)),
        "memory_used_gb": None if used_gb is None else round(used_gb, 2),
        "memory_total_gb": None if total_gb is None else round(total_gb, 2),
    }


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None
    return value if math.isfinite(value) and value >= 0 else None
