"""A stub `pynvml` for a real `gpufleet worker` process: a test writes it into a folder it puts
first on the worker's PYTHONPATH (`install`), then injects faults while the worker runs by
rewriting the state file beside it (`inject`): an XID event, uncorrectable ECC errors, a
GPU that fell off the bus. It answers what detection, the load sampler and the health reader
ask, as nvidia-ml-py does (NVMLError with its `value`, handles, event sets)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STUB = '''
"""Stub pynvml written by tests/fake_nvml.py: its GPUs' state is nvml_state.json beside it."""
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

_STATE = Path(__file__).with_name("nvml_state.json")
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
nvmlEventTypeXidCriticalError = 8
_delivered = set()


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


def _state():
    return json.loads(_STATE.read_text())


def _gpu(handle):
    gpu = _state()["gpus"][handle]
    if gpu.get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return gpu


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    if _state()["gpus"][index].get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return index


def nvmlDeviceGetIndex(handle):
    return handle


def nvmlDeviceGetName(handle):
    return "NVIDIA Stub GPU"


def nvmlDeviceGetUUID(handle):
    return f"GPU-stub-{handle}"


def nvmlDeviceGetMemoryInfo(handle):
    _gpu(handle)
    return SimpleNamespace(total=80 * 1024**3, free=80 * 1024**3, used=0)


def nvmlDeviceGetUtilizationRates(handle):
    _gpu(handle)
    return SimpleNamespace(gpu=0, memory=0)


def nvmlSystemGetDriverVersion():
    return "550.90.07"


def nvmlSystemGetCudaDriverVersion():
    return 12040


def nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type):
    return int(_gpu(handle).get("ecc", 0))


def nvmlDeviceGetRetiredPagesPendingStatus(handle):
    return int(bool(_gpu(handle).get("retired_pending", False)))


def nvmlDeviceGetRemappedRows(handle):
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetTemperature(handle, sensor):
    return int(_gpu(handle).get("temperature", 40))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return int(_gpu(handle).get("throttle", 0))


def nvmlEventSetCreate():
    return object()


def nvmlDeviceRegisterEvents(handle, types, event_set):
    pass


def nvmlEventSetWait(event_set, timeout_ms):
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        for n, (index, xid) in enumerate(_state().get("xids", [])):
            if n not in _delivered:
                _delivered.add(n)
                return SimpleNamespace(
                    device=index, eventType=nvmlEventTypeXidCriticalError, eventData=xid
                )
        if time.monotonic() >= deadline:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        time.sleep(0.05)
'''


def install(folder: Path, gpus: int = 2) -> dict[str, str]:
    """Write the stub into `folder` with `gpus` healthy GPUs; the environment of a worker
    that imports it (first on its PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(STUB)
    _write(folder, {"gpus": [{} for _ in range(gpus)], "xids": []})
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{path}" if path else str(folder)}


def inject(folder: Path, *, gpu: int, xid: int | None = None, **facts: Any) -> None:
    """GPU `gpu` now has these facts (`ecc`, `lost`, `retired_pending`, `temperature`), and
    an XID event waits for the worker's next wait."""
    state = json.loads((folder / "nvml_state.json").read_text())
    state["gpus"][gpu].update(facts)
    if xid is not None:
        state["xids"].append([gpu, xid])
    _write(folder, state)


def _write(folder: Path, state: dict[str, Any]) -> None:
    tmp = folder / "nvml_state.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(folder / "nvml_state.json")  # whole, never half-written when read
