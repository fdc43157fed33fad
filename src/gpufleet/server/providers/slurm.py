"""The `slurm` provider: each worker a Slurm batch job (docs/capacity.md, The slurm provider).

A launch is `sbatch --parsable` on the pool's partition with its time limit, its account when
set, `--gres=gpu:N` for a pool of N GPUs, and the batch script on sbatch's stdin, which `exec`s
the pool's command (`gpufleet worker`); the job id it prints is the instance id. The worker's
settings, its token among them, are values in sbatch's own environment that `--export` names:
never on a command line, where `ps` or `squeue` would show them. Every job is named
`gpufleet-<pool>`; to terminate one is `scancel`, and the list is `squeue` of this user's jobs
of that name on the partition. Every failure is a `ProviderError` carrying what Slurm printed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence

from gpufleet.domain import pools
from gpufleet.errors import ProviderError
from gpufleet.server.providers import WorkerLaunch
from gpufleet.server.providers.local import _inherited

JOB_PREFIX = "gpufleet-"  # a pool's jobs are named `gpufleet-<pool>`
COMMAND_TIMEOUT_S = 60.0  # sbatch, scancel or squeue: a controller that long silent is down
JOB_ID = re.compile(r"([0-9]{1,20})(;[A-Za-z0-9_.\-]{1,64})?")  # `<id>` or `<id>;<cluster>`
# What a job's environment may carry by name: Slurm sets its own SLURM_* in the job, and
# sbatch's SBATCH_* (a QOS, a reservation set for the orchestrator) are sbatch's options.
EXPORTABLE = re.compile(r"(?!SLURM_|SBATCH_)[A-Za-z_][A-Za-z0-9_]*")


def job_name(pool: str) -> str:
    return f"{JOB_PREFIX}{pool}"


def launch_environment(worker: WorkerLaunch) -> dict[str, str]:
    """sbatch's environment: the orchestrator's less its own settings (as a local worker
    inherits it), then the worker's settings."""
    return {**_inherited(), **worker.environment(), "GPUFLEET_WORK_DIR": str(worker.work_dir)}


def batch_script(config: pools.SlurmProvider, worker: WorkerLaunch) -> str:
    return (
        "#!/bin/sh\n"
        f"# gpufleet worker {worker.name} of pool {worker.pool} (docs/capacity.md)\n"
        f"exec {shlex.join(config.command)}\n"
    )


def sbatch_argv(
    config: pools.SlurmProvider, worker: WorkerLaunch, environment: Mapping[str, str]
) -> list[str]:
    """sbatch's command line for a worker: options and names only, never a setting's value."""
    exported = sorted(name for name in environment if EXPORTABLE.fullmatch(name))
    argv = [
        "sbatch",
        "--parsable",
        f"--partition={config.partition}",
        f"--time={config.time_limit}",
        f"--job-name={job_name(worker.pool)}",
        f"--comment={worker.name}",
        f"--chdir={worker.work_dir}",
        f"--output={worker.work_dir / 'worker.log'}",
        "--open-mode=append",
        "--no-requeue",  # a node lost takes its worker with it; the pool launches anew
        f"--export={','.join(exported)}",
    ]
    if config.account is not None:
        argv.append(f"--account={config.account}")
    if worker.gpus > 0:
        argv.append(f"--gres=gpu:{worker.gpus}")
    return argv


def parse_job_id(stdout: str, stderr: str = "") -> str:
    """The job id `sbatch --parsable` printed on its last line (`<id>` or `<id>;<cluster>`)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    found = JOB_ID.fullmatch(lines[-1]) if lines else None
    if found is None:
        raise ProviderError(
            f"sbatch printed no job id (got {stdout.strip()[-200:]!r}); check its stderr", stderr
        )
    return found.group(1)


def parse_listing(stdout: str, pool: str | None = None) -> list[str]:
    """The job ids of `squeue --format=%i|%j` (id, name) of `pool`'s jobs, or of every pool's;
    a line that is not an id and a name is refused."""
    ids = []
    for line in filter(None, (line.strip() for line in stdout.splitlines())):
        job_id, bar, name = line.partition("|")
        if not (bar and job_id.isascii() and job_id.isdigit()):
            raise ProviderError(
                f"squeue printed {line[:200]!r} where a job id and name were expected"
            )
        if name == job_name(pool) if pool is not None else name.startswith(JOB_PREFIX):
            ids.append(job_id)
    return ids


def _job_id(instance_id: str) -> str:
    if not (instance_id.isascii() and instance_id.isdigit()):
        raise ProviderError(f"{instance_id!r} is not a Slurm job id (digits)")
    return instance_id


def _run(
    argv: Sequence[str], *, stdin: str = "", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command; its failure to start or finish is a `ProviderError`."""
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ProviderError(
            f"{argv[0]} is not on the orchestrator's PATH: install Slurm's client commands "
            "(Debian: slurm-client) where the orchestrator runs",
            str(exc),
        ) from exc
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr if isinstance(exc.stderr, str) else ""
        raise ProviderError(
            f"{argv[0]} did not answer in {COMMAND_TIMEOUT_S:.0f} s: is slurmctld up?", said
        ) from exc
    except OSError as exc:
        raise ProviderError(f"could not run {argv[0]}: {exc}", str(exc)) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        said = last.removeprefix(f"{argv[0]}: ").removeprefix("error: ")
        raise ProviderError(f"{argv[0]} failed (exit {done.returncode}): {said}", done.stderr)
    return done


class SlurmProvider:
    """The provider of one `slurm` configuration: stateless, all it knows is in Slurm."""

    def __init__(self, config: pools.SlurmProvider) -> None:
        self.config = config

    def launch(self, worker: WorkerLaunch) -> str:
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        env = launch_environment(worker)
        argv = sbatch_argv(self.config, worker, env)
        done = _run(argv, stdin=batch_script(self.config, worker), env=env)
        return parse_job_id(done.stdout, done.stderr)

    def terminate(self, instance_id: str) -> None:
        """`scancel`: SIGTERM to the worker, SIGKILL after Slurm's KillWait. A job already
        ended is no error (scancel says nothing of it)."""
        _run(["scancel", _job_id(instance_id)])

    def list(self, pool: str | None = None) -> list[str]:
        """This user's jobs on the partition (and account) not ended: `pool`'s, or those
        of every pool."""
        argv = ["squeue", "--noheader", "--me", "--format=%i|%j"]
        argv.append(f"--partition={self.config.partition}")
        if self.config.account is not None:
            argv.append(f"--account={self.config.account}")
        if pool is not None:
            argv.append(f"--name={job_name(pool)}")
        return parse_listing(_run(argv).stdout, pool)
