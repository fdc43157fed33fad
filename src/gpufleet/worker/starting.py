"""Everything between an accepted offer and its process: the spec, the folder, the checkpoint
it resumes from, the environment. Whatever fails here is the attempt's "could not start: …";
a `Fenced` answer (the attempt is no longer ours) is raised as it is."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.errors import AgentError
from gpufleet.progress import RESUME_FROM_ENV
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.inputs import download_inputs
from gpufleet.worker.job import JobSpec, Workspace, job_environment, prepare_workspace
from gpufleet.worker.offer import Offer
from gpufleet.worker.resume import Downloads, download_checkpoint, retried
from gpufleet.worker.uploads import FileDigest
from gpufleet.worker.workdir_cache import WorkdirCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    spec: JobSpec
    space: Workspace
    env: dict[str, str]
    resumed: list[FileDigest] = field(default_factory=list)  # files put in place to resume
    resumed_path: str | None = None  # the checkpoint folder they are in


async def prepare(
    offer: Offer,
    work_dir: Path,
    gpus: Sequence[int],
    downloads: Downloads,
    backoff: Callable[[], Backoff],
    workdirs: WorkdirCache | None = None,
) -> Prepared:
    spec = JobSpec.from_offer(offer)
    space = prepare_workspace(work_dir, spec)
    if spec.workdir is not None:
        if workdirs is None or not spec.attempt_id:
            raise AgentError("the job brings a workdir, and no cache or attempt was given for it")
        await workdirs.put_in(
            space.folder,
            spec.workdir,
            downloads=downloads,
            job_id=spec.job_id,
            attempt_id=spec.attempt_id,
            backoff=backoff,
        )
    await download_inputs(downloads, spec.inputs, space.folder, backoff)
    env = job_environment(spec, space, spec.gpus(gpus))
    if spec.secret_env:
        env.update(await _secrets(downloads, spec, backoff))
    resume = spec.resume
    if resume is None:
        return Prepared(spec, space, env)
    files = await download_checkpoint(
        downloads,
        resume,
        job_id=spec.job_id,
        attempt_id=spec.attempt_id or "",
        folder=space.folder,
        backoff=backoff,
    )
    target = space.folder / resume.path
    env[RESUME_FROM_ENV] = str(target)
    if spec.simpletuner:
        _resume_simpletuner(space, spec, str(target))
    log.info(
        "job %s resumes from %s (step %s) in %s", offer.label, resume.name, resume.step, target
    )
    return Prepared(spec, space, env, files, resume.path)


async def _secrets(
    downloads: Downloads, spec: JobSpec, backoff: Callable[[], Backoff]
) -> dict[str, str]:
    """The values of the secrets the job's env refers to, fetched for this attempt: they go
    into its process's environment only (never a file, never a log line)."""
    if not spec.attempt_id:
        raise AgentError("the job's env refers to secrets, and the offer names no attempt")
    answer = await retried(
        backoff,
        functools.partial(downloads.fetch_secrets, spec.job_id, spec.attempt_id),
        "the job's secrets could not be fetched",
    )
    env = answer.get("env")
    if not isinstance(env, dict):
        raise AgentError("the orchestrator sent no secrets for the job's env")
    wanted = set(spec.secret_env)
    values = {k: v for k, v in env.items() if k in wanted and isinstance(v, str) and "\0" not in v}
    if missing := sorted(wanted - values.keys()):
        raise AgentError(f"the orchestrator sent no value for env {', '.join(missing)}")
    return values


def _resume_simpletuner(space: Workspace, spec: JobSpec, folder: str) -> None:
    """SimpleTuner reads where to resume from its config, not from the environment."""
    config = {**dict(spec.config), "resume_from_checkpoint": folder}
    try:
        space.config_path.write_text(json.dumps(config, indent=2, default=str))
    except OSError as exc:
        raise AgentError(f"cannot write {space.config_path}: {exc}; check --work-dir") from exc
