"""The `slurm` provider: each worker a Slurm batch job (docs/capacity.md, The slurm provider).

A launch is `sbatch --parsable` on the pool's partition with its time limit, its account when
set and `--gres=gpu:N` for a pool of N GPUs, of a batch script written in the launch's folder
that `exec`s the pool's command (`gpufleet worker`); the job id it prints is the instance id.
The worker's settings, its token among them, are values in sbatch's own environment that
`--export` names: never on a command line, where `ps` or `squeue` would show them. A pool's
jobs are named `gpufleet-<pool>`; to terminate one is `scancel`, and the list is `squeue` of
this user's jobs of that name on the partition. The commands run as the command provider's
do (`command.run`: a process group, killed at `--pool-call-timeout`); every failure is a
`ProviderError` carrying what Slurm printed.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping, Sequence

from gpufleet.domain import pools
from gpufleet.errors import ProviderError
from gpufleet.server.providers import Launched, WorkerLaunch, inherited_environment
from gpufleet.server.providers.command import LIST_READ, STDOUT_READ, Ran, run

SCRIPT = "worker.sbatch"  # the batch script, in the launch's folder
JOB_PREFIX = "gpufleet-"  # a pool's jobs are named `gpufleet-<pool>`
JOB_ID = re.compile(r"([0-9]{1,20})(;[A-Za-z0-9_.\-]{1,64})?")  # `<id>` or `<id>;<cluster>`
# What a job's environment may carry by name: Slurm sets its own SLURM_* in the job, and
# sbatch's SBATCH_* (a QOS, a reservation set for the orchestrator) are sbatch's options.
EXPORTABLE = re.compile(r"(?!SLURM_|SBATCH_)[A-Za-z_][A-Za-z0-9_]*")


def job_name(pool: str) -> str:
    return f"{JOB_PREFIX}{pool}"


def launch_environment(worker: WorkerLaunch) -> dict[str, str]:
    """sbatch's environment: the orchestrator's less its own settings (as a local worker
    inherits it), then the worker's settings."""
    return {
        **inherited_environment(),
        **worker.environment(),
        "GPUFLEET_WORK_DIR": str(worker.work_dir),
    }


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
    return [*argv, str(worker.work_dir / SCRIPT)]


def parse_job_id(stdout: str, stderr: str = "") -> str:
    """The job id `sbatch --parsable` printed on its last line (`<id>` or `<id>;<cluster>`)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    found = JOB_ID.fullmatch(lines[-1]) if lines else None
    if found is None:
        raise ProviderError(
            f"sbatch printed no job id (got {stdout.strip()[-200:]!r}); check its stderr", stderr
        )
    return found.group(1)


def parse_listing(stdout: str, pool: str) -> list[str]:
    """The job ids of `squeue --format=%i|%j` (id, name) of `pool`'s jobs; a line that is not
    an id and a name is refused."""
    ids = []
    for line in filter(None, (line.strip() for line in stdout.splitlines())):
        job_id, bar, name = line.partition("|")
        if not (bar and job_id.isascii() and job_id.isdigit()):
            raise ProviderError(
                f"squeue printed {line[:200]!r} where a job id and name were expected"
            )
        if name == job_name(pool):
            ids.append(job_id)
    return ids


def _job_id(instance_id: str) -> str:
    if not (instance_id.isascii() and instance_id.isdigit()):
        raise ProviderError(f"{instance_id!r} is not a Slurm job id (digits)")
    return instance_id


def _run(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    secret: str | None = None,
    stdout_read: int = STDOUT_READ,
) -> Ran:
    """Run a Slurm command to its end; not found, killed or failed is a `ProviderError`."""
    env = inherited_environment() if env is None else env
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise ProviderError(
            f"{argv[0]} is not on the orchestrator's PATH: install Slurm's client commands "
            "(Debian: slurm-client) where the orchestrator runs"
        )
    ran = run(argv, env, timeout_s, what=argv[0], secret=secret, stdout_read=stdout_read)
    if ran.code != 0:
        last = (ran.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        said = last.removeprefix(f"{argv[0]}: ").removeprefix("error: ")
        how = f"exit {ran.code}" if ran.code > 0 else f"killed by signal {-ran.code}"
        raise ProviderError(f"{argv[0]} failed ({how}): {said}", ran.stderr)
    return ran


class SlurmProvider:
    """One pool's `slurm` provider: stateless, all it knows is in Slurm."""

    def __init__(self, config: pools.SlurmProvider, pool: str, timeout_s: float) -> None:
        self.config = config
        self.pool = pool
        self.timeout_s = timeout_s

    def launch(self, worker: WorkerLaunch) -> Launched:
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        (worker.work_dir / SCRIPT).write_text(batch_script(self.config, worker))
        env = launch_environment(worker)
        argv = sbatch_argv(self.config, worker, env)
        ran = _run(argv, self.timeout_s, env, secret=worker.token)
        return Launched(parse_job_id(ran.stdout, ran.stderr), ran.stderr)

    def terminate(self, instance_id: str) -> None:
        """`scancel`: SIGTERM to the worker, SIGKILL after Slurm's KillWait. A job already
        ended is no error (scancel says nothing of it)."""
        _run(["scancel", _job_id(instance_id)], self.timeout_s)

    def list(self) -> list[str]:
        """This user's jobs of the pool's name on its partition (and account), not ended."""
        argv = ["squeue", "--noheader", "--me", "--format=%i|%j"]
        argv += [f"--partition={self.config.partition}", f"--name={job_name(self.pool)}"]
        if self.config.account is not None:
            argv.append(f"--account={self.config.account}")
        return parse_listing(_run(argv, self.timeout_s, stdout_read=LIST_READ).stdout, self.pool)
