"""Fleet health (#37 A) with real `gpufleet server` and `gpufleet worker` processes: a stub
`pynvml` on the worker's PYTHONPATH injects XID 79, uncorrectable ECC errors and a lost GPU;
a fake `nvidia-smi` reports health where NVML is missing; a real preflight script fails
until a file exists; the circuit breaker drains a worker whose jobs cannot start, and only an
admin's key undrains it (docs/workers.md, Health)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import fake_nvml
from tests.e2e.commands import gf, ok, one_line_error
from tests.e2e.conftest import (
    ServerProcess,
    WorkerProcess,
    job_state,
    serving,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("health"), None)


def waits_for(path: Path) -> list[str]:
    """A job's command that runs until `path` exists, then exits 0."""
    code = f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.05)"
    return [sys.executable, "-c", code]


def record_where(worker: WorkerProcess, what: str, test: Callable[[dict[str, Any]], bool]) -> Any:
    return wait_until(
        lambda: rec if test(rec := worker.record()) else None,
        timeout=20,
        message=f"worker {worker.name}: {what} (log:\n{worker.log()})",
    )


def test_a_gpu_that_falls_off_the_bus_is_taken_out_and_its_job_finishes_elsewhere(
    server: ServerProcess, agents: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    labels = {"pool": unique("xid")}
    sick_nvml = tmp_path / "sick-nvml"
    sick = agents(server, labels=labels, persistent=True, env=fake_nvml.install(sick_nvml)).start()
    assert sick.record()["gpu_count"] == 2
    done = tmp_path / "done"
    job = submit_job(server, labels, waits_for(done), gpu_count=2, max_retries=0)
    wait_job(server, job, "running")

    fake_nvml.inject(sick_nvml, gpu=0, xid=79)

    first = wait_until(
        lambda: (
            (h := job_state(server, job)["attempt_history"])[0]["status"] == "preempted" and h[0]
        ),
        timeout=20,
        message="the attempt on the sick GPU to end",
    )
    assert "XID 79" in first["error"]
    rec = record_where(sick, "GPU 0 out", lambda r: r["gpu_faults"] and not r["current_job_id"])
    assert rec["gpu_count"] == 1
    assert rec["gpu_faults"] == [{"index": 0, "reason": "XID 79 (fell off the bus)"}]
    assert "GPU 0 taken out: XID 79" in sick.log_path.read_text()  # the whole log
    shown = ok(gf(server, "workers", "show", sick.id))
    assert "GPU 0: XID 79 (fell off the bus)" in shown
    healthy = agents(
        server, labels=labels, persistent=True, env=fake_nvml.install(tmp_path / "ok-nvml")
    ).start()
    done.touch()
    finished = wait_job(server, job, "completed", "failed")
    assert finished["status"] == "completed", finished
    assert finished["worker_id"] == healthy.id  # max_retries 0: no retry was spent


def test_uncorrectable_ecc_errors_and_a_lost_gpu_shrink_what_an_idle_worker_offers(
    server: ServerProcess, agents: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    nvml = tmp_path / "nvml"
    worker = agents(server, persistent=True, env=fake_nvml.install(nvml)).start()

    fake_nvml.inject(nvml, gpu=1, ecc=3)
    rec = record_where(worker, "GPU 1 out", lambda r: len(r["gpu_faults"]) == 1)
    assert rec["gpu_faults"] == [{"index": 1, "reason": "3 uncorrectable ECC error(s)"}]
    assert rec["gpu_count"] == 1

    fake_nvml.inject(nvml, gpu=0, lost=True)
    rec = record_where(worker, "both GPUs out", lambda r: len(r["gpu_faults"]) == 2)
    assert rec["gpu_faults"][0] == {"index": 0, "reason": "fell off the bus (GPU is lost)"}
    assert rec["gpu_count"] == 0
    with server.admin() as admin:
        faults = admin.get("/api/audit", params={"type": "gpu.fault", "target": worker.id})
    assert len(faults.json()["events"]) == 2


GPU_ROWS = "0, NVIDIA Fake GPU, 24576, GPU-0, 550.90.07\\n1, NVIDIA Fake GPU, 24576, GPU-1, 550"
HEALTH_ROWS = "0, 0, No, 45, 0x0000000000000000\\n1, 4, No, 88, 0x0000000000000040"
FAKE_SMI = f"""#!/bin/sh
case "$1" in
  --query-gpu=index,name*) printf '{GPU_ROWS}\\n' ;;
  --query-gpu=index,utilization*) printf '0, 0, 0, 24576\\n1, 0, 0, 24576\\n' ;;
  --query-gpu=index,ecc*) printf '{HEALTH_ROWS}\\n' ;;
  *) echo "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |" ;;
esac
"""


def test_where_nvml_is_missing_nvidia_smi_reports_a_gpu_with_uncorrectable_errors(
    server: ServerProcess, agents: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}

    worker = agents(server, persistent=True, env=env).start()

    rec = record_where(worker, "GPU 1 out", lambda r: bool(r["gpu_faults"]))
    assert rec["gpu_faults"] == [{"index": 1, "reason": "4 uncorrectable ECC error(s)"}]
    assert rec["gpu_count"] == 1


PREFLIGHT = """#!/bin/sh
echo "checking the scratch disk"
if [ ! -f "$1" ]; then
  echo "scratch disk not mounted: $1 is missing"
  exit 1
fi
echo ok
"""


def test_a_failing_preflight_keeps_the_worker_from_jobs_until_it_passes_before_each_job(
    server: ServerProcess, agents: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    script, flag = tmp_path / "preflight.sh", tmp_path / "mounted"
    script.write_text(PREFLIGHT)
    script.chmod(0o755)
    labels = {"pool": unique("preflight")}
    env = {**os.environ, "GPUFLEET_PREFLIGHT": f"{script} {flag}"}  # the setting's variable
    worker = agents(
        server,
        labels=labels,
        persistent=True,
        env=env,
        extra_args=("--preflight-interval", "0.3"),
    ).start()
    rec = record_where(worker, "unhealthy", lambda r: r["presence"] == "unhealthy")
    assert "is missing" in rec["preflight_error"] and "exit code 1" in rec["preflight_error"]
    assert "preflight fails" in ok(gf(server, "workers", "list"))
    job = submit_job(server, labels, [sys.executable, "-c", "pass"])
    # The submit dispatches before it answers: an eligible worker would hold it by now.
    assert job_state(server, job)["status"] == "queued"

    flag.touch()
    assert wait_job(server, job, "completed", "failed")["status"] == "completed"
    assert worker.record()["preflight_error"] is None

    flag.unlink()  # broken again: the check before the next job finds it
    second = submit_job(server, labels, [sys.executable, "-c", "pass"])
    record_where(worker, "unhealthy again", lambda r: r["preflight_error"] is not None)
    assert job_state(server, second)["status"] in ("queued", "offered")
    flag.touch()
    assert wait_job(server, second, "completed", "failed")["status"] == "completed"
    first = job_state(server, second)["attempt_history"][0]
    assert first["status"] == "withdrawn" and "preflight failed" in first["error"]


def test_three_jobs_that_cannot_start_trip_the_breaker_and_only_an_admin_undrains(
    server: ServerProcess, agents: Callable[..., WorkerProcess]
) -> None:
    labels = {"pool": unique("breaker")}
    worker = agents(server, labels=labels, persistent=True).start()
    missing = ["/nonexistent/train-binary"]
    for _ in range(3):
        failed = wait_job(server, submit_job(server, labels, missing, max_retries=0), "failed")
        assert "could not start" in failed["error"]

    rec = record_where(worker, "drained by the breaker", lambda r: r["drained"])
    assert "circuit breaker" in rec["drain_reason"] and rec["infra_failures"] == 3
    assert "circuit breaker" in ok(gf(server, "workers", "show", worker.id))
    with server.admin() as admin:
        made = admin.post(
            "/api/admin/api-keys", json={"name": "reader", "permissions": ["queue.read"]}
        )
    refused = gf(server, "workers", "undrain", worker.id, key=made.json()["key"])
    assert "permission" in one_line_error(refused).lower()
    assert worker.record()["drained"] is True

    ok(gf(server, "workers", "undrain", worker.id))
    rec = worker.record()
    assert (rec["drained"], rec["drain_reason"], rec["infra_failures"]) == (False, None, 0)
    job = submit_job(server, labels, [sys.executable, "-c", "pass"])
    assert wait_job(server, job, "completed", "failed")["status"] == "completed"
