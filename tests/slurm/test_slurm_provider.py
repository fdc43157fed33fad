"""The `slurm` provider against a real Slurm: a launch is a batch job on the pool's partition
with its GPUs, the worker's settings in its environment and nowhere on a command line; the
list is the pool's jobs; terminate is scancel; sbatch's refusals come back with its words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpufleet.domain import pools
from gpufleet.errors import ProviderError
from gpufleet.server.providers import WorkerLaunch
from gpufleet.server.providers.local import log_tail
from gpufleet.server.providers.slurm import SlurmProvider
from tests.e2e.conftest import process_alive, unique
from tests.slurm.cluster import PARTITION, Cluster, every_command_line, missing_programs
from tests.waiting import wait_until

TOKEN = "wt_" + "s3cr3t" * 6
TIMEOUT_S = 30.0
# What the batch job runs instead of a worker: it writes what it was given, then waits.
FAKE_WORKER = (
    "import json, os, time\n"
    "given = {k: v for k, v in os.environ.items() if k.startswith(('GPUFLEET_', 'SLURM_JOB_'))}\n"
    "given |= {'pid': os.getpid(), 'cwd': os.getcwd()}\n"
    "open('given.json.part', 'w').write(json.dumps(given))\n"
    "os.rename('given.json.part', 'given.json')\n"
    "print('fake worker up', flush=True)\n"
    "time.sleep(120)\n"
)


def config(**fields: object) -> pools.SlurmProvider:
    given = {
        "type": "slurm",
        "partition": PARTITION,
        "time_limit": "5",
        "command": [sys.executable, "-c", FAKE_WORKER],
        **fields,
    }
    made = pools.check_provider(given)
    assert isinstance(made, pools.SlurmProvider)
    return made


def worker(tmp_path: Path, pool: str, gpus: int = 1) -> WorkerLaunch:
    return WorkerLaunch(
        orchestrator_url="http://127.0.0.1:9",
        token=TOKEN,
        name=f"{pool}-w1",
        persistent=False,
        pool=pool,
        work_dir=tmp_path / pool,
        gpus=gpus,
    )


def given(work_dir: Path) -> dict[str, str]:
    found = wait_until(
        lambda: (work_dir / "given.json").is_file() and work_dir / "given.json",
        timeout=30,
        message=f"the batch job to start (its log: {log_tail(work_dir, 2000)!r})",
    )
    return dict(json.loads(found.read_text()))


def test_a_worker_runs_as_a_batch_job_of_its_pool_that_scancel_ends(
    slurm_env: Cluster, tmp_path: Path
) -> None:
    pool = unique("hpc")
    provider = SlurmProvider(config(), pool, TIMEOUT_S)
    spec = worker(tmp_path, pool)
    launched = provider.launch(spec)
    job = launched.instance_id
    assert job.isdigit() and launched.stderr == ""
    seen = given(spec.work_dir)
    assert seen["GPUFLEET_WORKER_TOKEN"] == TOKEN
    assert seen["GPUFLEET_WORKER_NAME"] == spec.name
    assert seen["GPUFLEET_POOL"] == pool
    assert seen["GPUFLEET_ORCHESTRATOR_URL"] == "http://127.0.0.1:9"
    assert seen["SLURM_JOB_ID"] == job
    assert seen["cwd"] == str(spec.work_dir)
    # squeue: running, named for its pool, one GPU, the worker's name as its comment.
    assert slurm_env.jobs()[job] == f"RUNNING|gpufleet-{pool}|gres:gpu:1|{spec.name}"
    assert "fake worker up" in log_tail(spec.work_dir, 1000)  # its output: worker.log
    # The token is in the job's environment only: no command line, no job record shows it.
    assert TOKEN not in every_command_line()
    script = (spec.work_dir / "worker.sbatch").read_text()
    assert script.startswith("#!/bin/sh\n") and TOKEN not in script
    assert TOKEN not in slurm_env.run("scontrol", "show", "job", "--details", job)
    assert TOKEN not in slurm_env.run("squeue", "--noheader", "--format=%all")
    # Listed for its pool only.
    assert provider.list() == [job]
    assert SlurmProvider(config(), unique("other"), TIMEOUT_S).list() == []

    provider.terminate(job)
    wait_until(lambda: job not in slurm_env.jobs(), timeout=30, message=f"job {job} to end")
    wait_until(lambda: not process_alive(int(seen["pid"])), timeout=10, message="its process")
    assert provider.list() == []
    provider.terminate(job)  # already gone: no error


def test_sbatch_refusing_a_launch_is_an_error_with_its_stderr(
    slurm_env: Cluster, tmp_path: Path
) -> None:
    refused = unique("refused")
    with pytest.raises(ProviderError) as no_partition:
        SlurmProvider(config(partition="nope"), refused, TIMEOUT_S).launch(
            worker(tmp_path, refused)
        )
    assert "sbatch failed (exit 1)" in str(no_partition.value)
    assert "Invalid partition name specified" in str(no_partition.value)
    assert "invalid partition specified: nope" in no_partition.value.stderr
    with pytest.raises(ProviderError) as too_many:  # the node has 2 GPUs
        SlurmProvider(config(), refused, TIMEOUT_S).launch(worker(tmp_path, refused, gpus=3))
    assert "Requested node configuration is not available" in too_many.value.stderr
    assert SlurmProvider(config(), refused, TIMEOUT_S).list() == []


def test_a_pool_of_no_gpus_asks_slurm_for_none(slurm_env: Cluster, tmp_path: Path) -> None:
    pool = unique("cpu")
    provider = SlurmProvider(config(), pool, TIMEOUT_S)
    spec = worker(tmp_path, pool, gpus=0)
    job = provider.launch(spec).instance_id
    given(spec.work_dir)
    assert slurm_env.jobs()[job].split("|")[2] == "N/A"
    provider.terminate(job)
    wait_until(lambda: job not in slurm_env.jobs(), timeout=30, message=f"job {job} to end")


def test_terminate_refuses_an_instance_id_that_is_not_a_job_id(slurm_env: Cluster) -> None:
    for hostile in ("--user=root", "12 13", "", "-1", "\u0661\u0662"):
        with pytest.raises(ProviderError, match="is not a Slurm job id"):
            SlurmProvider(config(), "hpc", TIMEOUT_S).terminate(hostile)


def test_without_slurms_commands_a_launch_says_to_install_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch there
    with pytest.raises(ProviderError, match="sbatch is not on the orchestrator's PATH: install"):
        SlurmProvider(config(), "hpc", TIMEOUT_S).launch(worker(tmp_path, "hpc"))


def test_squeue_failing_or_hanging_is_an_error_with_its_words_never_an_empty_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if missing_programs():
        pytest.skip("Slurm's client commands are not installed: run make system-packages")
    bad = tmp_path / "bad.conf"
    bad.write_text("NoSuchOption=1\n")
    monkeypatch.setenv("SLURM_CONF", str(bad))
    with pytest.raises(ProviderError) as failed:
        SlurmProvider(config(), "hpc", TIMEOUT_S).list()
    assert (
        str(failed.value) == "squeue failed (exit 1): fatal: Unable to process configuration file"
    )
    assert "unrecognized key: NoSuchOption" in failed.value.stderr
    # A configuration that is not there: Slurm retries for a minute; the call is killed.
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-such.conf"))
    with pytest.raises(ProviderError, match="did not finish in 1 s and was killed"):
        SlurmProvider(config(), "hpc", 1.0).list()
