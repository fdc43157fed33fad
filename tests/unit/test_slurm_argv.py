"""The `slurm` provider's words with Slurm, without a cluster: the sbatch command line a pool
makes, the batch script, and what sbatch and squeue print read back (garbage refused)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gpufleet.domain import pools
from gpufleet.errors import ProviderError
from gpufleet.server.providers import WorkerLaunch
from gpufleet.server.providers.slurm import (
    batch_script,
    launch_environment,
    parse_job_id,
    parse_listing,
    sbatch_argv,
)

TOKEN = "wt_abcdefghijklmnopqrstuvwxyz0123456789"
WORK = Path("/data/pools/hpc/launch_1")


def launch(gpus: int = 2) -> WorkerLaunch:
    return WorkerLaunch("http://head:8001", TOKEN, "hpc-1", True, "hpc", WORK, gpus=gpus)


def slurm(**fields: object) -> pools.SlurmProvider:
    made = pools.check_provider(
        {"type": "slurm", "partition": "gpu", "time_limit": "4:00:00"} | fields
    )
    assert isinstance(made, pools.SlurmProvider)
    return made


def test_sbatch_is_given_the_pools_partition_time_gpus_and_account() -> None:
    env = {"GPUFLEET_WORKER_TOKEN": TOKEN, "PATH": "/usr/bin", "HOME": "/root"}
    argv = sbatch_argv(slurm(account="lab"), launch(), env)
    assert argv[:2] == ["sbatch", "--parsable"]
    assert argv[-1] == f"{WORK}/worker.sbatch"  # the script, after every option
    assert {
        "--partition=gpu",
        "--time=4:00:00",
        "--account=lab",
        "--gres=gpu:2",
        "--job-name=gpufleet-hpc",
        "--comment=hpc-1",
        f"--chdir={WORK}",
        f"--output={WORK}/worker.log",
        "--no-requeue",
        "--export=GPUFLEET_WORKER_TOKEN,HOME,PATH",
    } <= set(argv)


def test_no_account_no_gres_when_the_pool_has_none() -> None:
    argv = sbatch_argv(slurm(), launch(gpus=0), {})
    assert not [a for a in argv if a.startswith(("--account", "--gres"))]
    assert "--export=" in argv  # nothing named: Slurm's own SLURM_* only


def test_the_workers_settings_are_named_on_the_command_line_never_their_values() -> None:
    env = launch_environment(launch())
    argv = sbatch_argv(slurm(), launch(), env)
    assert not any(TOKEN in arg or "http://head:8001" in arg for arg in argv)
    exported = next(a for a in argv if a.startswith("--export=")).removeprefix("--export=")
    names = set(exported.split(","))
    assert set(launch().environment()) | {"GPUFLEET_WORK_DIR"} <= names
    assert env["GPUFLEET_WORKER_TOKEN"] == TOKEN and env["GPUFLEET_WORK_DIR"] == str(WORK)


def test_slurms_own_variables_and_odd_names_are_not_exported() -> None:
    env = {
        "SLURM_JOB_ID": "7",
        "SBATCH_QOS": "high",
        "BASH_FUNC_x%%": "() {}",
        "A,B": "1",
        "OK": "1",
    }
    exported = next(a for a in sbatch_argv(slurm(), launch(), env) if a.startswith("--export="))
    assert exported == "--export=OK"


def test_the_orchestrators_own_settings_stay_out_of_the_jobs_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql://fleet:secret@db/fleet")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/test.conf")
    env = launch_environment(launch())
    assert "GPUFLEET_DATABASE_URL" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/test.conf"  # sbatch finds its cluster


def test_the_batch_script_execs_the_pools_command_quoted() -> None:
    assert batch_script(slurm(), launch()).endswith("\nexec gpufleet worker\n")
    odd = slurm(command=["/opt/venv/bin/gpufleet", "worker", "--gpus", "0; rm -rf /", "$HOME"])
    script = batch_script(odd, launch())
    assert script.startswith("#!/bin/sh\n")
    last = script.splitlines()[-1]
    assert shlex.split(last.removeprefix("exec ")) == list(odd.command)


@pytest.mark.parametrize(
    ("printed", "job"),
    [("4242\n", "4242"), ("4242;cluster-a\n", "4242"), ("warming up\n17\n", "17"), ("  9  ", "9")],
)
def test_the_job_id_sbatch_parsable_prints_is_read(printed: str, job: str) -> None:
    assert parse_job_id(printed) == job


@pytest.mark.parametrize(
    "printed",
    [
        "",
        "\n\n",
        "Submitted batch job 42",
        "42 43",
        "-1",
        "42;",
        "42;a b",
        "\u0664\u0662",
        "1" * 21,
        "4\x002",
    ],
)
def test_anything_else_sbatch_prints_is_an_error_with_its_stderr(printed: str) -> None:
    with pytest.raises(ProviderError, match="sbatch printed no job id") as refused:
        parse_job_id(printed, "sbatch: warning: something")
    assert refused.value.stderr == "sbatch: warning: something"


def test_squeue_listings_are_the_pools_jobs_only() -> None:
    listing = "12|gpufleet-hpc\n13|gpufleet-hpc-2\n14|someone-else\n\n15|gpufleet-hpc\n"
    assert parse_listing(listing, "hpc") == ["12", "15"]
    assert parse_listing(listing, "hpc-2") == ["13"]
    assert parse_listing("", "hpc") == []


@pytest.mark.parametrize(
    "printed",
    [
        "12",
        "JOBID|NAME",
        "squeue: error: slurm_load_jobs error",
        "x1|gpufleet-hpc",
        "\u0661|gpufleet-hpc",
    ],
)
def test_a_squeue_line_that_is_not_an_id_and_a_name_is_an_error(printed: str) -> None:
    with pytest.raises(ProviderError, match="where a job id and name were expected"):
        parse_listing(f"12|gpufleet-hpc\n{printed}\n", "hpc")
