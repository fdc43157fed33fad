"""What runs between a prepared attempt and its command (docs/jobs.md): the job's virtualenv
(worker/env_cache.py) put first on its PATH, the folder handed to `--run-as`'s user, and the
config's `setup` command, run in the folder with the environment active.

Their output goes to the job's log (shipped while they run), and what fails here fails the
attempt before its command starts ("could not start: …"): uv's own words when the
environment cannot be built, the setup's exit code and last lines when it fails. A stop
(a cancel) meanwhile ends them and the attempt is reported cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.worker.env_cache import EnvCache, EnvFailed, EnvStopped, Lease, Source
from gpufleet.worker.job import JobSpec
from gpufleet.worker.runner import JobProcess, LineSink, Outcome, run_to_end
from gpufleet.worker.settings import AgentSettings
from gpufleet.worker.starting import Prepared

SETUP_SHELL = "/bin/sh"


class SetupFailed(EnvFailed):
    """The config's `setup` command failed: the command does not run."""


class Prelude:
    def __init__(
        self,
        settings: AgentSettings,
        on_line: LineSink,
        stop: asyncio.Event,
        ship: Callable[[], Coroutine[Any, Any, None]],  # ships the job's log until cancelled
    ) -> None:
        self._settings = settings
        self._on_line = on_line
        self._stop = stop
        self._ship = ship
        self.lease: Lease | None = None

    async def ready(self, job: Prepared) -> dict[str, str]:
        """The environment the job's command starts with, once its env is built and its
        setup has run."""
        spec, folder, env = job.spec, job.space.folder, dict(job.env)
        settings, user = self._settings, self._settings.job_user
        cache = EnvCache(
            settings.work_dir,
            settings.env_cache_size,
            index_url=settings.index_url,
            find_links=settings.find_links,
        )
        if (source := await source_of(spec, folder, cache)) is not None:
            async with self._shipping():
                self.lease = await cache.lease(source, self._run, self._note, self._stop)
            activate(env, self.lease.path, spec)
        if user is not None:  # --run-as: the folder is the user's, the worker's files are not
            user.hand_over(folder)
            env.update({k: v for k, v in user.environment().items() if k not in spec.env})
        if spec.setup is not None:
            async with self._shipping():
                await self._setup(spec.setup, spec.timeout_s, folder, env)
        return env

    def release(self) -> None:
        if self.lease is not None:
            self.lease.release()

    async def _setup(
        self, setup: str, timeout_s: float | None, folder: Path, env: Mapping[str, str]
    ) -> None:
        self._note(f"setup: {setup}")
        process = await JobProcess.start(
            [SETUP_SHELL, "-c", setup],
            cwd=folder,
            env=env,
            on_line=self._on_line,
            user=self._settings.job_user,
        )
        result = await self._to_end(process, timeout_s)
        if result is not None:
            raise SetupFailed(f"the setup command {result}")
        self._note("setup done")

    async def _run(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
        process = await JobProcess.start(argv, cwd=cwd, env=env, on_line=self._on_line)
        await self._to_end(process, None)
        return process.returncode or 0, "\n".join(process.tail)

    async def _to_end(self, process: JobProcess, timeout_s: float | None) -> str | None:
        """Run it to its end; what went wrong, or None when it exited 0."""
        result = await run_to_end(
            process,
            timeout_s=timeout_s,
            stop=self._stop,
            grace=self._settings.cancel_grace,
            stop_reason=lambda: "stopped",
        )
        if result.outcome is Outcome.CANCELLED:
            raise EnvStopped("the attempt was stopped before its command started")
        return result.error if result.outcome is Outcome.FAILED else None

    def _note(self, text: str) -> None:
        self._on_line("stderr", f"[gpufleet] {text}")

    @contextlib.asynccontextmanager
    async def _shipping(self) -> AsyncIterator[None]:
        shipping = asyncio.create_task(self._ship(), name="prelude logs")
        try:
            yield
        finally:
            shipping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await shipping


def activate(env: dict[str, str], venv: Path, spec: JobSpec) -> None:
    """The virtualenv's `python` first on the job's PATH (unless its env sets PATH)."""
    env["VIRTUAL_ENV"] = str(venv)
    env.pop("PYTHONHOME", None)
    if "PATH" not in spec.env:
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)])


async def source_of(spec: JobSpec, folder: Path, cache: EnvCache) -> Source | None:
    """What the job's environment is built from: its requirements, or its workdir's file."""
    if spec.requirements is not None:
        return Source("requirements.txt", spec.requirements)
    if spec.env_from is None:
        return None
    path, text = await asyncio.to_thread(_read_env_from, spec.env_from, folder)
    if path.name == "pyproject.toml":
        return Source("pyproject.toml", text)
    if path.name == "uv.lock":
        return Source("requirements.txt", await cache.exported(path.parent))
    return Source("requirements.txt", text)


def _read_env_from(env_from: str, folder: Path) -> tuple[Path, str]:
    path = (folder / env_from).resolve()
    if not path.is_relative_to(folder.resolve()) or not path.is_file():
        raise EnvFailed(f"env_from {env_from!r} is not a file of the job's workdir")
    return path, path.read_text(errors="replace")
