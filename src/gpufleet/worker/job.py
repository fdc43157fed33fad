"""What an offered job runs (its `JobSpec`), and the folder and environment it runs in.

Each attempt runs in `<work-dir>/jobs/<job_id>/<attempt_id>/`, which holds `config.json` (the
job's config, named by `CONFIG_PATH`), `progress.jsonl` (named by `GPUFLEET_PROGRESS_FILE`, see
`gpufleet.progress`) and `output.log` (everything the command printed). The command starts in
that folder, so relative paths in it are relative to the folder: name scripts by absolute path
or run installed modules with `python -m`, or bring them: a job whose config names a
`workdir` snapshot finds its files unpacked in the folder (docs/jobs.md), and gpufleet's
own three files in `.gpufleet-job/` beside them. The job's `PATH` starts with the folder of the
worker's own Python, so `python` in a command is the interpreter that runs the worker (and has
gpufleet installed), unless the job's `env` sets `PATH` itself; a job with `requirements`
gets its virtualenv's `bin/` before it (worker/prelude.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpufleet.errors import AgentError
from gpufleet.progress import CHECKPOINT_SIGNAL_ENV, DEFAULT_CHECKPOINT_SIGNAL, PROGRESS_FILE_ENV
from gpufleet.worker.inputs import InputFile
from gpufleet.worker.inputs import from_offer as inputs_of
from gpufleet.worker.keep import BadKeepRule, KeepRules
from gpufleet.worker.leftovers import AGENT_PID_ENV, JOB_DIR_ENV
from gpufleet.worker.offer import BadOffer, Offer
from gpufleet.worker.resume import Resume, ResumeFailed

log = logging.getLogger(__name__)

SIMPLETUNER_COMMAND = (sys.executable, "-m", "simpletuner.train")

# The worker's own secrets stay out of the job's environment.
PRIVATE_ENV = (
    "GPUFLEET_WORKER_TOKEN",
    "SIMPLETUNER_WORKER_TOKEN",
    "GPUFLEET_WORKER_TOKEN_FILE",
    "GPUFLEET_INHERITED_KEY_FD",
)
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
_WORKDIR = re.compile(r"sha256:([0-9a-f]{64})")
OWN_FOLDER = ".gpufleet-job"  # a workdir job's config.json, progress.jsonl and output.log


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    attempt_id: str | None
    argv: tuple[str, ...]
    config: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # env name → the secret it refers to: fetched for the attempt as it starts (starting.py)
    secret_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpu_count: int | None = None
    timeout_s: float | None = None
    keep: KeepRules = field(default_factory=KeepRules)
    resume: Resume | None = None
    inputs: tuple[InputFile, ...] = ()  # its dependencies' artifacts to fetch (inputs.py)
    workdir: str | None = None  # the sha256 hex of the snapshot to unpack in the folder
    # The environment (docs/jobs.md): a requirements file's text, or the workdir's file that
    # names them; and a shell command run in the folder before the command.
    requirements: str | None = None
    env_from: str | None = None
    setup: str | None = None

    @property
    def simpletuner(self) -> bool:
        """A SimpleTuner config: no command, the trainer reads config.json."""
        return self.argv == SIMPLETUNER_COMMAND

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> JobSpec:
        return cls.from_offer(Offer.from_event(event))

    @classmethod
    def from_offer(cls, offer: Offer) -> JobSpec:
        """What to run; raises `BadOffer`, with what is wrong, for anything it cannot run."""
        try:
            return cls._parse(offer)
        except BadOffer:
            raise
        except Exception as exc:  # whatever the offer holds, it is this job's failure
            raise BadOffer(
                f"job {offer.job_id}: the offer cannot be read ({type(exc).__name__}: {exc})"
            ) from exc

    @classmethod
    def _parse(cls, offer: Offer) -> JobSpec:
        event, job_id = offer.event, offer.job_id
        config = event.get("config") or {}
        if not isinstance(config, Mapping):
            raise BadOffer(f"job {job_id}: config is not an object")
        command = event.get("command", config.get("command"))
        env = event.get("env")
        if env is None:
            env = config.get("env") or {}
        argv = _argv(job_id, command)
        try:
            keep = KeepRules.from_config(config, simpletuner=argv == SIMPLETUNER_COMMAND)
            resume = Resume.from_offer(event.get("resume"))
            inputs = inputs_of(event.get("inputs"))
        except (BadKeepRule, ResumeFailed) as exc:
            raise BadOffer(f"job {job_id}: {exc.message}") from exc
        return cls(
            job_id=job_id,
            attempt_id=offer.attempt_id,
            argv=argv,
            keep=keep,
            resume=resume,
            inputs=inputs,
            workdir=_workdir(job_id, config.get("workdir")),
            requirements=_text(job_id, config, "requirements"),
            env_from=_text(job_id, config, "env_from"),
            setup=_text(job_id, config, "setup"),
            config=MappingProxyType(dict(config)),
            env=MappingProxyType(_env(job_id, env)),
            secret_env=MappingProxyType(_secret_env(job_id, event.get("secret_env"))),
            gpu_count=_gpu_count(job_id, event.get("gpu_count")),
            timeout_s=_timeout(job_id, event.get("timeout_s", config.get("timeout_s"))),
        )

    def gpus(self, offered: Sequence[int]) -> tuple[int, ...]:
        """The GPUs (indexes) this job gets of those the worker offers: all, if it asks more."""
        wanted = len(offered) if self.gpu_count is None else self.gpu_count
        if wanted > len(offered):
            log.warning(
                "job %s asks for %d GPUs; this worker offers %d: it gets them all",
                self.job_id,
                wanted,
                len(offered),
            )
        return tuple(offered[: max(wanted, 0)])


@dataclass(frozen=True)
class Workspace:
    folder: Path
    own: Path | None = None  # where gpufleet's files go; None: the folder itself

    @property
    def config_path(self) -> Path:
        return (self.own or self.folder) / "config.json"

    @property
    def progress_path(self) -> Path:
        return (self.own or self.folder) / "progress.jsonl"

    @property
    def output_path(self) -> Path:
        return (self.own or self.folder) / "output.log"


def prepare_workspace(work_dir: Path, spec: JobSpec) -> Workspace:
    folder = work_dir / "jobs" / _safe(spec.job_id) / _safe(spec.attempt_id or "attempt")
    try:
        # A workdir's files may be named config.json too: gpufleet's go beside them.
        space = Workspace(folder, folder / OWN_FOLDER if spec.workdir else None)
        (space.own or folder).mkdir(parents=True, exist_ok=True)
        space.config_path.write_text(json.dumps(dict(spec.config), indent=2, default=str))
        space.progress_path.touch()
    except OSError as exc:
        raise AgentError(
            f"cannot prepare the job folder {folder}: {exc}; check --work-dir"
        ) from exc
    return space


def job_environment(
    spec: JobSpec,
    space: Workspace,
    gpu_indices: Sequence[int],
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The worker's environment, then the job's `env`, then what the worker decides."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in PRIVATE_ENV}
    if "PATH" not in spec.env:
        python_bin = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([python_bin, env.get("PATH", os.defpath)])
    env.update(spec.env)
    visible = ",".join(str(index) for index in gpu_indices)
    env.update(
        {
            # Empty when the job holds no GPU: it must not grab one the worker did not give it.
            "CUDA_VISIBLE_DEVICES": visible,
            "HIP_VISIBLE_DEVICES": visible,
            # nvidia-smi and NVML number GPUs in PCI bus order; make CUDA agree.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUFLEET_JOB_ID": spec.job_id,
            "GPUFLEET_ATTEMPT_ID": spec.attempt_id or "",
            JOB_DIR_ENV: str(space.folder),
            AGENT_PID_ENV: str(os.getpid()),  # what its processes outlive is told (leftovers.py)
            "CONFIG_PATH": str(space.config_path),
            PROGRESS_FILE_ENV: str(space.progress_path),
            CHECKPOINT_SIGNAL_ENV: DEFAULT_CHECKPOINT_SIGNAL.name,
            "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1"),
        }
    )
    return env


def _argv(job_id: str, command: Any) -> tuple[str, ...]:
    if command is None:
        return SIMPLETUNER_COMMAND
    if isinstance(command, str):
        argv = tuple(shlex.split(command))
    elif isinstance(command, Sequence) and all(
        isinstance(part, str | int | float) and not isinstance(part, bool) for part in command
    ):
        argv = tuple(str(part) for part in command)
    else:
        raise BadOffer(
            f"job {job_id}: command must be an argv list of strings, got {command!r:.200}"
        )
    if not argv or not argv[0]:
        raise BadOffer(f"job {job_id}: the command is empty; give config.command as an argv list")
    if any("\0" in part for part in argv):
        raise BadOffer(f"job {job_id}: the command holds a NUL character")
    return argv


def _env(job_id: str, env: Any) -> dict[str, str]:
    if not isinstance(env, Mapping):
        raise BadOffer(f"job {job_id}: env must be an object of strings, got {env!r:.200}")
    result = {}
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise BadOffer(f"job {job_id}: {name!r:.200} is not an environment variable name")
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, int | float):
            value = str(value)
        if not isinstance(value, str) or "\0" in value:
            raise BadOffer(
                f"job {job_id}: env {name} must be a string without NUL, got {value!r:.200}"
            )
        result[name] = value
    return result


def _secret_env(job_id: str, refs: Any) -> dict[str, str]:
    """The offer's `secret_env`: env names to secret names (never values)."""
    if refs is None:
        return {}
    if not isinstance(refs, Mapping) or not all(
        isinstance(k, str) and k and "=" not in k and "\0" not in k and isinstance(v, str)
        for k, v in refs.items()
    ):
        raise BadOffer(f"job {job_id}: secret_env must name a secret for each env name")
    return dict(refs)


def _gpu_count(job_id: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadOffer(f"job {job_id}: gpu_count must be a whole number, got {value!r:.200}")
    return value


def _timeout(job_id: str, value: Any) -> float | None:
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise BadOffer(f"job {job_id}: timeout_s must be a positive number, got {value!r:.200}")
    return float(value)


def _safe(part: str) -> str:
    cleaned = _SAFE_ID.sub("_", part).strip(".")
    return cleaned or "_"


def _workdir(job_id: str, value: Any) -> str | None:
    if value is None:
        return None
    match = _WORKDIR.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise BadOffer(f"job {job_id}: workdir is not a snapshot digest: {value!r:.100}")
    return match.group(1)


def _text(job_id: str, config: Mapping[str, Any], name: str) -> str | None:
    value = config.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or "\0" in value:
        raise BadOffer(f"job {job_id}: {name} must be a string without NUL, got {value!r:.100}")
    return value
