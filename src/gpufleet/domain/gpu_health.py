"""When a GPU is sick enough to take itself out, what the worker then offers, and when a
worker whose attempts keep dying of infrastructure is drained (the circuit breaker).

The worker reads each GPU's health (worker/gpu_health.py: NVML, else `nvidia-smi`) and sends
the readings with its heartbeat; the orchestrator asks `faults` which GPUs are out, offers
the worker's jobs by `offered_gpus`, and counts the attempts it lost by `breaker`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpufleet.domain.states import AttemptStatus

# XIDs after which the GPU cannot be trusted with a job until it is reset or the machine is
# rebooted: NVIDIA's "XID Errors" catalogue (docs.nvidia.com/deploy/xid-errors), the ones
# whose action is a GPU reset or a node reboot, not an application fix:
#   48 double-bit ECC error           63 ECC page retirement / row remapping recorded
#   64 ECC page retirement / row remapping failure        74 NVLink error
#   79 GPU has fallen off the bus     92 high single-bit ECC error rate
#   94 contained ECC error (the process died; the GPU needs a reset)
#   95 uncontained ECC error (every process on the GPU is corrupt)
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})

MAX_XIDS = 16  # XIDs a reading keeps (the newest), so a storm of them stays one small body
MAX_OUTPUT = 4000  # characters of a failing preflight's output kept (its tail)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's health as the worker read it. None: the source could not say."""

    index: int
    lost: bool = False  # fell off the bus, or its handle fails (NVML_ERROR_GPU_IS_LOST)
    xids: tuple[int, ...] = ()  # critical XID events seen since the worker started
    ecc_uncorrected: int | None = None  # volatile (since the driver loaded)
    retired_pending: bool | None = None  # pages pending retirement (pre-Ampere)
    remap_failed: bool | None = None  # a row remapping failed (Ampere and later)
    remap_pending: bool | None = None  # remapped rows waiting for a GPU reset
    temperature_c: float | None = None
    throttle: tuple[str, ...] = ()  # active clock throttle reasons, in words

    def as_wire(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "lost": self.lost,
            "xids": list(self.xids[-MAX_XIDS:]),
            "ecc_uncorrected": self.ecc_uncorrected,
            "retired_pending": self.retired_pending,
            "remap_failed": self.remap_failed,
            "remap_pending": self.remap_pending,
            "temperature_c": self.temperature_c,
            "throttle": list(self.throttle),
        }


def fault_of(reading: GpuReading) -> str | None:
    """Why this GPU is out, in words; None while it is fit for a job. Heat and throttling
    slow a job but do not corrupt it: they are shown, never a fault."""
    if reading.lost:
        return "fell off the bus (GPU is lost)"
    fatal = [x for x in reading.xids if x in FATAL_XIDS]
    if fatal:
        return f"XID {fatal[-1]}" + (" (fell off the bus)" if fatal[-1] == 79 else "")
    if reading.ecc_uncorrected:
        return f"{reading.ecc_uncorrected} uncorrectable ECC error(s)"
    if reading.remap_failed:
        return "a row remapping failed"
    if reading.retired_pending or reading.remap_pending:
        return "memory pages pending retirement: the GPU needs a reset"
    return None


def faults(readings: Iterable[GpuReading]) -> dict[int, str]:
    """Each faulty GPU's index, and why."""
    found = {r.index: fault_of(r) for r in readings}
    return {index: why for index, why in sorted(found.items()) if why is not None}


def new_faults(known: Mapping[int, str], readings: Iterable[GpuReading]) -> dict[int, str]:
    """The faults these readings add to those already recorded. A fault is kept until the
    worker registers again (a restarted agent reads its GPUs afresh)."""
    return {i: why for i, why in faults(readings).items() if i not in known}


def offered_gpus(reported: int, faulty: Iterable[int], indices: Sequence[int] = ()) -> int:
    """The GPUs a worker offers: those it reported, less the faulty ones among them (all of
    `faulty` when it did not list its GPUs' indices)."""
    out = set(faulty)
    if indices:
        out &= set(indices)
    return max(0, reported - len(out))


def preflight_output(output: str) -> str:
    """The tail of a failing preflight's output, as shown and stored."""
    text = output.strip()
    return text if len(text) <= MAX_OUTPUT else "…" + text[-(MAX_OUTPUT - 1) :]


class Ending(StrEnum):
    """What an attempt's end says of its worker, for the circuit breaker."""

    INFRA = "infra"  # the worker let it down: lost, could not start, a GPU fault
    SOUND = "sound"  # the job ran and ended on its own terms: the worker works
    NEUTRAL = "neutral"  # says nothing of the worker: cancelled, withdrawn, preempted


def ending(
    status: AttemptStatus,
    *,
    started: bool,
    acknowledged: bool,
    gpu_fault: bool,
    failed_to_start_elsewhere: bool = False,
) -> Ending:
    """How an attempt's end counts toward its worker's run of infrastructure failures. A
    process that could not start counts (`states.failed_to_start`), as an offer never
    acknowledged does not (its worker may have vanished, not of this job). The other side of
    the coin is the poison rule's: a job that already could not start on another worker is
    the suspect, so its failing to start here says nothing of this worker (otherwise a few
    poison jobs would drain every worker they reach; each counts once, where it first
    failed)."""
    if gpu_fault:
        return Ending.INFRA
    if status is AttemptStatus.LOST:
        return Ending.INFRA if (started or acknowledged) else Ending.NEUTRAL
    if status is AttemptStatus.FAILED:
        if started:
            return Ending.SOUND
        return Ending.NEUTRAL if failed_to_start_elsewhere else Ending.INFRA
    if status is AttemptStatus.COMPLETED:
        return Ending.SOUND
    return Ending.NEUTRAL


@dataclass(frozen=True, slots=True)
class Breaker:
    """The worker's run of infrastructure failures after an attempt's end, and whether that
    run drains it now."""

    in_a_row: int
    trips: bool


def breaker(in_a_row: int, end: Ending, limit: int, *, drained: bool) -> Breaker:
    """`limit` infrastructure failures in a row drain the worker (`--drain-after-infra-
    failures`; 0 turns the breaker off); a sound end starts the count again."""
    if end is Ending.SOUND:
        return Breaker(0, False)
    if end is Ending.NEUTRAL:
        return Breaker(in_a_row, False)
    count = in_a_row + 1
    return Breaker(count, limit > 0 and count >= limit and not drained)


def breaker_reason(count: int) -> str:
    return (
        f"circuit breaker: its last {count} attempts ended by infrastructure failure (lost, "
        "could not start, GPU fault); fix the machine, then undrain it"
    )


@dataclass(frozen=True, slots=True)
class Preflight:
    """The worker's preflight as it last ran (`gpufleet worker --preflight`)."""

    ok: bool
    output: str = ""


def preflight_error(preflight: Preflight) -> str | None:
    """What the worker record keeps of a preflight: None while it passes, else the tail of
    its output (never empty: a failing check with no output still says it failed)."""
    if preflight.ok:
        return None
    return preflight_output(preflight.output) or "the preflight failed and printed nothing"


def kind_of(reason: str) -> str:
    """A fault's kind, for the metric's label (few values: never the words themselves)."""
    if reason.startswith("XID"):
        return "xid"
    if "ECC" in reason:
        return "ecc"
    if "bus" in reason:
        return "lost"
    return "memory"
