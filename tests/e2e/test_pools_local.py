"""Worker pools with the `local` provider against a real orchestrator (#36): the leader
launches `gpufleet worker` processes for waiting jobs, follows them, and ends their launches;
a launch whose worker never calls home is terminated and backed off."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    ServerProcess,
    create_pool,
    pool_launches,
    process_alive,
    submit_job,
    wait_job,
)
from tests.waiting import wait_until

FLAGS = {"pool-interval": 0.3}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("pools-local"), None, **FLAGS)
    proc.start()
    yield proc
    proc.kill(15)


def make_pool(server: ServerProcess, **fields: Any) -> str:
    """A pool (`local` unless `fields` name its provider) of no GPUs, max 2, labelled
    pool=<its name>."""
    return create_pool(server, "burst", fields.pop("provider", {"type": "local"}), **fields)


launches = pool_launches


def held_jobs(server: ServerProcess, pool: str, gate: Path, count: int = 3) -> list[str]:
    """Jobs for the pool's workers, each holding its worker until the file `gate` appears."""
    hold = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    return [
        submit_job(server, {"pool": pool}, [sys.executable, "-c", hold], gpu_count=0)
        for _ in range(count)
    ]


def running(server: ServerProcess, jobs: list[str]) -> int:
    """How many of the jobs run now."""
    states = [wait_job(server, j, "queued", "offered", "running")["status"] for j in jobs]
    return states.count("running")


def pid_of(launch: dict[str, Any]) -> int:
    return int(launch["instance_id"].split("-")[1])


@pytest.fixture  # gone before the module's server starts: one orchestrator at a time
def unreachable(tmp_path: Path) -> Iterator[ServerProcess]:
    """An orchestrator whose local workers cannot call home: they are told to trust a CA
    file that is not one, so each exits before it registers."""
    root = tmp_path
    bad_ca = root / "not-a-ca.pem"
    bad_ca.write_text("not a certificate\n")
    env = {**os.environ, "GPUFLEET_CA_CERT": str(bad_ca)}
    proc = ServerProcess(root / "data", None, env=env, **FLAGS)
    proc.start()
    yield proc
    proc.kill(15)


def test_a_launch_that_never_registers_is_terminated_and_backed_off(
    unreachable: ServerProcess,
) -> None:
    pool = make_pool(unreachable, launch_timeout_s=6)
    submit_job(unreachable, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)
    failed = wait_until(
        lambda: (xs := launches(unreachable, pool)) and xs[0]["state"] == "terminated" and xs[0],
        timeout=30,
        message="the launch to time out and be terminated",
    )
    assert failed["registered_at"] is None
    assert failed["error"] == "its worker did not register in 6 s"
    assert "NO_CERTIFICATE" in failed["stderr"], failed  # the worker's words, kept
    assert not process_alive(pid_of(failed))
    with unreachable.admin() as admin:
        worker = admin.get(f"/api/admin/workers/{failed['worker_id']}").json()
    assert worker["connected_at"] is None
    # Backed off (30 s after a first failure): the decision says so, and launches nothing.
    wait_until(
        lambda: f"the last launch in pool {pool} failed" in unreachable.log_path.read_text(),
        timeout=10,
        message="the pool to back off",
    )
    assert len(launches(unreachable, pool)) == 1


def test_ephemeral_workers_are_launched_for_waiting_jobs_within_the_pools_max(
    server: ServerProcess,
) -> None:
    pool = make_pool(server)
    # Each job holds its worker until a file appears: the third waits for a worker the
    # first two leave room for, never a third at once.
    jobs = held_jobs(server, pool, gate := Path(server.data_dir) / f"{pool}.go")
    wait_until(
        lambda: running(server, jobs) == 2,
        timeout=60,
        message="two of the three jobs to run on launched workers",
    )
    live = [x for x in launches(server, pool) if x["state"] in ("launching", "registered")]
    assert len(live) == 2, live  # the third job waits: the pool is at its max
    gate.touch()
    ended = one_job_each_then_ended(server, pool, jobs)
    assert not any(process_alive(pid_of(x)) for x in ended)


def one_job_each_then_ended(
    server: ServerProcess, pool: str, jobs: list[str]
) -> list[dict[str, Any]]:
    """The jobs completed, each on an ephemeral worker of its own whose launch then ended;
    those launches."""
    done = [wait_job(server, j, "completed", "failed", timeout=60) for j in jobs]
    assert [d["status"] for d in done] == ["completed"] * 3, done
    assert len({d["worker_id"] for d in done}) == 3  # each ephemeral worker ran one job
    ended: list[dict[str, Any]] = wait_until(
        lambda: (
            len(xs := launches(server, pool)) == 3
            and all(x["state"] == "terminated" for x in xs)
            and xs
        ),
        timeout=30,
        message="the three launches to end once their workers left",
    )
    assert {x["worker_id"] for x in ended} == {d["worker_id"] for d in done}
    assert all(x["registered_at"] is not None and x["error"] is None for x in ended)
    return ended
