"""One offered job: what the `job_submit` event says, and the folder and environment it runs in.

Each attempt runs in `<work-dir>/jobs/<job_id>/<attempt_id>/`, which holds `config.json` (the
job's config, named by `CONFIG_PATH`), `progress.jsonl` (named by `GPUFLEET_PROGRESS_FILE`, see
`gpufleet.progress`) and `output.log` (everything the command printed). The command starts in
that folder, so relative paths in it are relative to the folder: name scripts by absolute path
or run installed modules with `python -m`. The job's `PATH` starts with the folder of the
worker's own Python, so `python` in a command is the interpreter that runs the worker (and has
gpufleet installed), unless the job's `env` sets `PATH` itself.
"""

from __future__ import annotations

import json
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
from gpufleet.progress import PROGRESS_FILE_ENV

SIMPLETUNER_COMMAND = (sys.executable, "-m", "simpletuner.train")

# The worker's own secrets stay out of the job's environment.
_PRIVATE_ENV = ("GPUFLEET_WORKER_TOKEN", "SIMPLETUNER_WORKER_TOKEN")
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")


class BadOffer(AgentError):
    """A `job_submit` event this agent cannot make sense of."""


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    attempt_id: str | None
    argv: tuple[str, ...]
    config: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpu_count: int | None = None
    timeout_s: float | None = None

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> JobSpec:
        job_id = event.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise BadOffer(f"job_submit without a job_id: {dict(event)!r:.200}")
        config = event.get("config") or {}
        if not isinstance(config, Mapping):
            raise BadOffer(f"job {job_id}: config is not an object")
        command = event.get("command", config.get("command"))
        env = event.get("env")
        if env is None:
            env = config.get("env") or {}
        timeout = event.get("timeout_s", config.get("timeout_s"))
        gpu_count = event.get("gpu_count")
        attempt = event.get("attempt_id")
        return cls(
            job_id=job_id,
            attempt_id=str(attempt) if attempt else None,
            argv=_argv(job_id, command),
            config=MappingProxyType(dict(config)),
            env=MappingProxyType({str(k): _env_value(v) for k, v in dict(env).items()}),
            gpu_count=None if gpu_count is None else int(gpu_count),
            timeout_s=float(timeout) if timeout else None,
        )

    @property
    def label(self) -> str:
        return f"{self.job_id}/{self.attempt_id}" if self.attempt_id else self.job_id


@dataclass(frozen=True)
class Workspace:
    folder: Path

    @property
    def config_path(self) -> Path:
        return self.folder / "config.json"

    @property
    def progress_path(self) -> Path:
        return self.folder / "progress.jsonl"

    @property
    def output_path(self) -> Path:
        return self.folder / "output.log"


def prepare_workspace(work_dir: Path, spec: JobSpec) -> Workspace:
    folder = work_dir / "jobs" / _safe(spec.job_id) / _safe(spec.attempt_id or "attempt")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        space = Workspace(folder)
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
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _PRIVATE_ENV}
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
            "GPUFLEET_JOB_DIR": str(space.folder),
            "CONFIG_PATH": str(space.config_path),
            PROGRESS_FILE_ENV: str(space.progress_path),
            "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1"),
        }
    )
    return env


def _argv(job_id: str, command: Any) -> tuple[str, ...]:
    if command is None:
        return SIMPLETUNER_COMMAND
    if isinstance(command, str):
        return tuple(shlex.split(command))
    if isinstance(command, Sequence) and all(
        isinstance(part, str | int | float) for part in command
    ):
        return tuple(str(part) for part in command)
    raise BadOffer(f"job {job_id}: command must be an argv list of strings, got {command!r:.200}")


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _safe(part: str) -> str:
    cleaned = _SAFE_ID.sub("_", part).strip(".")
    return cleaned or "_"
