"""When a GPU is out, what its worker then offers, and the circuit breaker
(domain/gpu_health.py); the worker's reading of NVML and nvidia-smi (worker/gpu_health.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import gpu_health
from gpufleet.domain.gpu_health import FATAL_XIDS, Ending, GpuReading, Preflight
from gpufleet.domain.states import AttemptStatus
from gpufleet.worker.gpu_health import HealthReader
from gpufleet.worker.health import run_preflight


def test_every_fatal_xid_takes_its_gpu_out_and_others_do_not() -> None:
    for xid in FATAL_XIDS:
        assert gpu_health.fault_of(GpuReading(index=0, xids=(xid,))) is not None
    for xid in (13, 31, 43, 45):  # application faults: the job's, not the GPU's
        assert gpu_health.fault_of(GpuReading(index=0, xids=(xid,))) is None


def test_heat_and_throttling_are_shown_never_a_fault() -> None:
    hot = GpuReading(index=0, temperature_c=99, throttle=("hardware thermal slowdown",))
    assert gpu_health.fault_of(hot) is None


def test_only_new_faults_are_news() -> None:
    readings = [GpuReading(index=0, lost=True), GpuReading(index=1, ecc_uncorrected=1)]
    assert gpu_health.new_faults({0: "fell off the bus"}, readings) == {
        1: "1 uncorrectable ECC error(s)"
    }


@given(st.integers(0, 8), st.sets(st.integers(0, 15)))
def test_a_worker_offers_its_gpus_less_the_faulty_ones_it_lists(
    reported: int, faulty: set[int]
) -> None:
    indices = list(range(reported))
    offered = gpu_health.offered_gpus(reported, faulty, indices)
    assert offered == reported - len(faulty & set(indices))
    assert 0 <= offered <= reported


def test_a_preflight_output_is_kept_as_its_bounded_tail() -> None:
    long = "\n".join(f"line {n}" for n in range(2000))
    kept = gpu_health.preflight_error(Preflight(ok=False, output=long))
    assert kept is not None and len(kept) == gpu_health.MAX_OUTPUT
    assert kept.endswith("line 1999")
    assert gpu_health.preflight_error(Preflight(ok=False, output="")) is not None
    assert gpu_health.preflight_error(Preflight(ok=True, output="fine")) is None


ENDS = st.sampled_from(list(Ending))


@given(st.lists(ENDS, max_size=30), st.integers(0, 5))
def test_the_breaker_trips_exactly_when_the_last_n_ends_were_infrastructure(
    ends: list[Ending], limit: int
) -> None:
    count, tripped_at = 0, None
    for n, end in enumerate(ends):
        decided = gpu_health.breaker(count, end, limit, drained=tripped_at is not None)
        count = decided.in_a_row
        if decided.trips:
            assert tripped_at is None  # once: a drained worker is not drained again
            tripped_at = n
    counted = [e for e in ends if e is not Ending.NEUTRAL]
    run = len(counted) - max((i + 1 for i, e in enumerate(counted) if e is Ending.SOUND), default=0)
    assert count == run
    if limit == 0:
        assert tripped_at is None
    elif tripped_at is not None:
        assert ends[tripped_at] is Ending.INFRA


def test_what_counts_as_an_infrastructure_failure() -> None:
    A = AttemptStatus
    infra = gpu_health.ending
    assert infra(A.LOST, started=True, acknowledged=True, gpu_fault=False) is Ending.INFRA
    assert infra(A.LOST, started=False, acknowledged=False, gpu_fault=False) is Ending.NEUTRAL
    assert infra(A.FAILED, started=False, acknowledged=True, gpu_fault=False) is Ending.INFRA
    assert infra(A.FAILED, started=True, acknowledged=True, gpu_fault=False) is Ending.SOUND
    # A job that could not start elsewhere either is the suspect (the poison rule's side).
    elsewhere = {"failed_to_start_elsewhere": True}
    assert infra(A.FAILED, started=False, acknowledged=True, gpu_fault=False, **elsewhere) is (
        Ending.NEUTRAL
    )
    assert infra(A.LOST, started=True, acknowledged=True, gpu_fault=False, **elsewhere) is (
        Ending.INFRA
    )
    assert infra(A.PREEMPTED, started=True, acknowledged=True, gpu_fault=True) is Ending.INFRA
    assert infra(A.PREEMPTED, started=True, acknowledged=True, gpu_fault=False) is Ending.NEUTRAL
    assert infra(A.WITHDRAWN, started=False, acknowledged=False, gpu_fault=False) is Ending.NEUTRAL
    assert infra(A.COMPLETED, started=True, acknowledged=True, gpu_fault=False) is Ending.SOUND


class NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class SickNvml:
    """GPU 0 well but throttled, GPU 1 with ECC errors, GPU 2 lost; no row remapping."""

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        if handle == 2:
            raise NvmlError(15)
        return 5 if handle == 1 else 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, handle: int) -> Any:
        raise NvmlError(3)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 80

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return 0x1 | 0x40 if handle == 0 else 0

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: int, kinds: int, events: object) -> None:
        pass

    def nvmlEventSetWait(self, events: object, timeout_ms: int) -> Any:
        return SimpleNamespace(device=0, eventType=8, eventData=79)

    def nvmlDeviceGetIndex(self, device: int) -> int:
        return device


def test_nvml_readings_name_throttling_ecc_errors_lost_gpus_and_kept_xids() -> None:
    reader = HealthReader([0, 1, 2], load_nvml=SickNvml, run=lambda argv: None)

    assert reader.wait_xids(10) is True
    first = reader.read()

    assert first is not None
    well, ecc, lost = first
    assert well.throttle == ("hardware thermal slowdown",) and well.xids == (79,)
    assert (ecc.ecc_uncorrected, ecc.remap_failed, ecc.temperature_c) == (5, None, 80.0)
    assert lost.lost is True
    assert reader.read() == first  # the XID and the lost GPU are kept


def test_nvidia_smi_health_is_read_where_nvml_is_missing_and_a_gpu_it_drops_is_lost() -> None:
    out = "0, 0, No, 45, 0x0000000000000004\n1, [N/A], Yes, [N/A], [N/A]\n"
    reader = HealthReader([0, 1, 2], load_nvml=lambda: None, run=lambda argv: out)

    assert reader.wait_xids(10) is None  # no NVML: nothing to wait for
    readings = reader.read()

    assert readings == [
        GpuReading(
            index=0,
            ecc_uncorrected=0,
            retired_pending=False,
            temperature_c=45.0,
            throttle=("software power cap",),
        ),
        GpuReading(index=1, retired_pending=True),
        GpuReading(index=2, lost=True),
    ]


def test_no_health_is_read_when_neither_tool_answers() -> None:
    calls: list[Any] = []
    reader = HealthReader([0], load_nvml=lambda: None, run=lambda argv: calls.append(argv))

    assert reader.read() is None and reader.read() is None
    assert len(calls) == 1  # not asked again every heartbeat


async def test_a_preflight_passes_on_exit_0_and_fails_with_its_output_and_exit_code() -> None:
    passed = await run_preflight("echo fine")
    failed = await run_preflight("echo 'no scratch disk' >&2; exit 3")

    assert passed == Preflight(ok=True, output="fine\n")
    assert failed == Preflight(ok=False, output="no scratch disk\n(exit code 3)")


async def test_a_preflight_that_hangs_is_killed_and_fails() -> None:
    hung = await run_preflight("sleep 30", limit_s=0.2)

    assert hung.ok is False and "ran past 0.2 s" in hung.output
