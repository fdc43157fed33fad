"""Each offered GPU's health, read for every heartbeat: NVML when it answers, else
`nvidia-smi` (docs/workers.md, Health). What counts as a fault is the domain's
(`domain/gpu_health.py`); this only reads.

NVML gives the most: critical XID events (an event set, waited on with a short timeout by
`wait_xids`, which the agent runs in a thread, loop after loop), volatile uncorrectable ECC
errors, pages pending retirement, remapped rows, temperature and throttle reasons, and a
GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST, or a handle that fails). `nvidia-smi`
gives the ECC count, pending retirement, temperature and throttle reasons. What was seen
once (an XID, a lost GPU) is kept for the agent's life: a restarted agent reads afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gpufleet.domain.gpu_health import MAX_XIDS, GpuReading
from gpufleet.worker.detect import CommandRunner, load_pynvml, run_command

log = logging.getLogger(__name__)

GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: no event within the wait
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
# nvmlClocksThrottleReason* bits (nvml.h), in words; GpuIdle (0x1) is no news.
THROTTLE_BITS = {
    0x2: "applications clocks",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock",
}
_SMI_HEALTH = (
    "index,ecc.errors.uncorrected.volatile.total,retired_pages.pending,temperature.gpu,"
    "clocks_throttle_reasons.active"
)


def throttle_words(mask: int) -> tuple[str, ...]:
    return tuple(words for bit, words in THROTTLE_BITS.items() if mask & bit)


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class HealthReader:
    """The offered GPUs' health now, as `GpuReading`s; None when neither NVML nor
    `nvidia-smi` answers (then nothing is sent, and neither is asked again)."""

    def __init__(
        self,
        indices: Sequence[int],
        *,
        load_nvml: Callable[[], Any] = load_pynvml,
        run: CommandRunner | None = None,
    ) -> None:
        self._indices = tuple(indices)
        self._load_nvml = load_nvml
        self._run = run or run_command
        self._nvml: Any = None
        self._source: str | None = None  # "nvml" or "smi" once one answered
        self._dead = not self._indices
        self._xids: dict[int, list[int]] = {}
        self._lost: set[int] = set()
        self._events: Any = None  # the NVML event set, once made

    # -- readings ----------------------------------------------------------------------

    def read(self) -> list[GpuReading] | None:
        if self._dead:
            return None
        found = None
        if self._source in (None, "nvml") and self._open_nvml():
            found = self._from_nvml()
            self._source = "nvml"
        if found is None and self._source in (None, "smi"):
            found = self._from_smi()
            if found is not None:
                self._source = "smi"
        if found is None and self._source is None:
            log.info("no GPU health to report: neither NVML nor nvidia-smi answered")
            self._dead = True
        return None if found is None else [self._kept(r) for r in found]

    def _kept(self, reading: GpuReading) -> GpuReading:
        """What was seen once stays: the XIDs, a lost GPU."""
        if reading.lost:
            self._lost.add(reading.index)
        xids = tuple(self._xids.get(reading.index, ()))[-MAX_XIDS:]
        return replace(reading, lost=reading.index in self._lost, xids=xids)

    def _open_nvml(self) -> bool:
        if self._nvml is not None:
            return True
        nvml = self._load_nvml()
        if nvml is None:
            return False
        try:
            nvml.nvmlInit()
        except Exception as exc:
            log.debug("NVML unavailable for GPU health: %s", exc)
            return False
        self._nvml = nvml
        return True

    def _from_nvml(self) -> list[GpuReading]:
        return [self._nvml_reading(index) for index in self._indices]

    def _nvml_reading(self, index: int) -> GpuReading:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            # A handle that fails for a GPU detection saw: it is gone (fell off the bus).
            log.warning("GPU %d: NVML has no handle for it (%s): counted lost", index, exc)
            return GpuReading(index=index, lost=True)
        reading = GpuReading(index=index)
        probes: list[tuple[str, Callable[[], Any]]] = [
            ("ecc_uncorrected", lambda: int(nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0))),
            ("retired_pending", lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))),
            ("remap", lambda: nvml.nvmlDeviceGetRemappedRows(handle)),
            ("temperature_c", lambda: float(nvml.nvmlDeviceGetTemperature(handle, 0))),
            ("throttle", lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
        ]
        for field, probe in probes:
            try:
                value = probe()
            except Exception as exc:
                if _code(exc) == GPU_IS_LOST:
                    log.warning("GPU %d is lost (NVML_ERROR_GPU_IS_LOST)", index)
                    return GpuReading(index=index, lost=True)
                continue  # not supported on this GPU (no ECC, no row remapping): unknown
            if field == "remap":
                _corrected, _uncorrected, pending, failed = value
                reading = replace(reading, remap_pending=bool(pending), remap_failed=bool(failed))
            elif field == "throttle":
                reading = replace(reading, throttle=throttle_words(int(value)))
            else:
                reading = replace(reading, **{field: value})
        return reading

    def _from_smi(self) -> list[GpuReading] | None:
        out = self._run(
            ["nvidia-smi", f"--query-gpu={_SMI_HEALTH}", "--format=csv,noheader,nounits"]
        )
        if not out:
            return None
        rows: dict[int, GpuReading] = {}
        for row in out.splitlines():
            cells = [cell.strip() for cell in row.split(",")]
            if len(cells) < 5 or not cells[0].isdigit():
                continue
            index = int(cells[0])
            rows[index] = GpuReading(
                index=index,
                ecc_uncorrected=int(cells[1]) if cells[1].isdigit() else None,
                retired_pending={"yes": True, "no": False}.get(cells[2].lower()),
                temperature_c=float(cells[3]) if cells[3].isdigit() else None,
                throttle=_throttle_cell(cells[4]),
            )
        if not rows:
            return None
        # nvidia-smi leaves out a GPU that fell off the bus: one it no longer lists is lost.
        return [rows.get(i) or GpuReading(index=i, lost=True) for i in self._indices]

    # -- XID events (NVML only) ----------------------------------------------------------

    def wait_xids(self, timeout_ms: int) -> bool | None:
        """Wait up to `timeout_ms` for a critical XID event (run in a thread); True if one
        came (the agent then sends a heartbeat at once); None when there are none to wait
        for here (no NVML, or it registers no events): the caller stops waiting."""
        if self._events is False or self._dead or not self._open_nvml():
            return None
        nvml = self._nvml
        if self._events is None:
            try:
                self._events = nvml.nvmlEventSetCreate()
                for index in self._indices:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    nvml.nvmlDeviceRegisterEvents(handle, _XID_EVENT, self._events)
            except Exception as exc:
                log.info("no XID events from NVML (%s): ECC and lost GPUs still count", exc)
                self._events = False  # tried and failed: not again
                return None
        try:
            data = nvml.nvmlEventSetWait(self._events, timeout_ms)
        except Exception as exc:
            if _code(exc) != _TIMEOUT:
                log.debug("waiting for XID events: %s", exc)
            return False
        device = self._index_of(data.device)
        if device is None:
            return False
        xid = int(data.eventData)
        log.error("GPU %d: XID %d", device, xid)
        self._xids.setdefault(device, []).append(xid)
        return True

    def _index_of(self, device: Any) -> int | None:
        try:
            index = int(self._nvml.nvmlDeviceGetIndex(device))
        except Exception:
            return None
        return index if index in self._indices else None


def _throttle_cell(cell: str) -> tuple[str, ...]:
    try:
        return throttle_words(int(cell, 16))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return ()
