"""Worker pools with the `slurm` provider against a real orchestrator and a real Slurm (#36):
the leader submits `gpufleet worker` as a batch job for the jobs that wait, the worker
registers and runs them; an ephemeral one leaves after its job and its batch job ends; an idle
persistent one above the pool's min is retired with scancel; sbatch's refusal is a failed
launch with its words."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    GPUFLEET,
    Member,
    ServerProcess,
    create_pool,
    pool_launches,
    submit_job,
    unique,
    wait_job,
)
from tests.slurm.cluster import DOWN_PARTITION, PARTITION, Cluster, every_command_line
from tests.waiting import wait_until

FLAGS = {"pool-interval": 0.3}


@pytest.fixture(scope="module")
def server(slurm: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("pools-slurm"), None, env=dict(slurm.env), **FLAGS)
    proc.start()
    yield proc
    proc.kill(15)


def make_pool(server: ServerProcess, **fields: Any) -> str:
    slurm = {"type": "slurm", "partition": PARTITION, "time_limit": "10"}
    return create_pool(
        server,
        "hpc",
        {**slurm, "command": [GPUFLEET, "worker"]},
        gpu_count=1,  # asked of Slurm (--gres=gpu:1); the jobs here need none
        max_workers=1,
        **fields,
    )


def held(gate: Path) -> list[str]:
    """A job's command that holds its worker until `gate` exists."""
    wait = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    return [sys.executable, "-c", wait]


def running_launch(server: ServerProcess, pool: str) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (
                (xs := pool_launches(server, pool)) and xs[0]["state"] == "registered" and xs[0]
            ),
            timeout=60,
            message=f"pool {pool}'s worker to register",
        )
    )


def worker_log(server: ServerProcess, pool: str, launch: dict[str, Any]) -> str:
    """What the batch job printed (`--output`: worker.log in the launch's folder)."""
    return (Path(server.data_dir) / "pools" / pool / launch["id"] / "worker.log").read_text()


def ended(server: ServerProcess, slurm: Cluster, pool: str, job: str) -> dict[str, Any]:
    """The launch of Slurm job `job`, once the job has left squeue and the launch ended."""
    wait_until(lambda: job not in slurm.jobs(), timeout=30, message=f"Slurm job {job} to end")
    return dict(
        wait_until(
            lambda: (xs := pool_launches(server, pool))[0]["state"] == "terminated" and xs[0],
            timeout=30,
            message=f"pool {pool}'s launch to end",
        )
    )


def test_an_ephemeral_worker_runs_as_a_slurm_job_and_its_job_ends_with_it(
    server: ServerProcess, slurm: Cluster
) -> None:
    pool = make_pool(server)
    gate = Path(server.data_dir) / f"{pool}.go"
    job = submit_job(server, {"pool": pool}, held(gate), gpu_count=0)
    launch = running_launch(server, pool)
    wait_job(server, job, "running", timeout=30)
    instance = launch["instance_id"]
    with server.admin() as admin:
        worker = admin.get(f"/api/admin/workers/{launch['worker_id']}").json()
    # squeue: the worker is a running batch job named for its pool, with the pool's GPU.
    assert slurm.jobs()[instance] == f"RUNNING|gpufleet-{pool}|gres:gpu:1|{worker['name']}"
    # Its token: in the environment Slurm keeps for the job, on no command line, in no job
    # record squeue or scontrol shows, and gone from the worker's own environment.
    token = slurm.stored_environment(instance)["GPUFLEET_WORKER_TOKEN"]
    assert len(token) > 20
    assert token not in every_command_line()
    assert token not in slurm.run("scontrol", "show", "job", "--details", instance)
    assert token not in slurm.run("squeue", "--noheader", "--format=%all")
    pids = slurm.pids(instance)
    assert pids
    assert not [pid for pid in pids if token.encode() in Path(f"/proc/{pid}/environ").read_bytes()]
    gate.touch()
    done = wait_job(server, job, "completed", "failed", timeout=30)
    assert (done["status"], done["worker_id"]) == ("completed", launch["worker_id"])
    last = ended(server, slurm, pool, instance)  # the worker left: its batch job ended
    assert last["registered_at"] is not None and last["error"] is None
    # It left by itself (the scancel that ends its launch may still find it exiting).
    assert "disconnected from the orchestrator" in worker_log(server, pool, last)
    assert len(pool_launches(server, pool)) == 1  # nothing waits: nothing more launched


def test_an_idle_persistent_worker_above_min_is_retired_with_scancel(
    server: ServerProcess, slurm: Cluster
) -> None:
    pool = make_pool(server, worker_type="persistent", idle_timeout_s=1)
    gate = Path(server.data_dir) / f"{pool}.go"
    jobs = [submit_job(server, {"pool": pool}, held(gate), gpu_count=0) for _ in range(2)]
    launch = running_launch(server, pool)
    instance = launch["instance_id"]
    assert slurm.jobs()[instance].startswith(f"RUNNING|gpufleet-{pool}|")
    gate.touch()
    done = [wait_job(server, j, "completed", "failed", timeout=30) for j in jobs]
    # One worker, one batch job, both jobs: it stayed after the first.
    assert {(d["status"], d["worker_id"]) for d in done} == {("completed", launch["worker_id"])}
    last = ended(server, slurm, pool, instance)
    assert last["instance_id"] == instance and last["error"] is None
    with server.admin() as admin:
        worker = admin.get(f"/api/admin/workers/{launch['worker_id']}").json()
    assert worker["status"] in ("draining", "offline"), worker  # drained, then cancelled
    assert f"retiring 1 worker of pool {pool}" in server.log_path.read_text()
    assert f"JOB {instance} ON {slurm.host} CANCELLED" in worker_log(server, pool, last)


def test_a_batch_job_still_pending_at_the_launch_timeout_is_cancelled_and_failed(
    server: ServerProcess, slurm: Cluster
) -> None:
    down = {"type": "slurm", "partition": DOWN_PARTITION, "time_limit": "5"}
    pool = create_pool(server, "down", down, launch_timeout_s=3)
    submit_job(server, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)
    launch = wait_until(
        lambda: (xs := pool_launches(server, pool)) and xs[0]["instance_id"] and xs[0],
        timeout=30,
        message="the batch job to be submitted",
    )
    instance = launch["instance_id"]
    assert slurm.jobs()[instance].startswith(f"PENDING|gpufleet-{pool}|")
    last = ended(server, slurm, pool, instance)
    assert last["error"] == "its worker did not register in 3 s"
    assert last["registered_at"] is None


def test_a_launch_sbatch_refuses_fails_with_its_words_and_a_member_cannot_make_a_pool(
    server: ServerProcess, slurm: Cluster
) -> None:
    pool = create_pool(server, "nope", {"type": "slurm", "partition": "nope", "time_limit": "5"})
    submit_job(server, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)
    failed = wait_until(
        lambda: (xs := pool_launches(server, pool)) and xs[0]["state"] == "failed" and xs[0],
        timeout=30,
        message="the launch to fail",
    )
    assert "sbatch failed (exit 1)" in failed["error"], failed
    assert "invalid partition specified: nope" in failed["stderr"], failed
    assert failed["instance_id"] is None
    member = Member(server, "hpc", "lead")
    with member.client() as c:
        refused = c.post(
            "/api/admin/pools",
            json={
                "name": unique("mine"),
                "provider": {"type": "slurm", "partition": PARTITION, "time_limit": "5"},
                "max_workers": 1,
            },
        )
    assert refused.status_code == 403, refused.text
    assert not any(j.split("|")[1].startswith("gpufleet-mine") for j in slurm.jobs().values())
