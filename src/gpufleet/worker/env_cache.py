"""The virtualenvs this worker builds for jobs (docs/jobs.md), with uv, shared by key.

A job whose config names `requirements` (or `env_from`, a file of its workdir) runs with a
virtualenv built from them. Its key is the sha256 of what it is built from, the Python
version and the platform: every job with the same key shares one, kept in
`<work-dir>/cache/envs/<key>/`. Built once, even when two jobs (of this worker or another
sharing its work dir) need it at once: the builder holds `.locks/<key>.build` while uv fills
a temporary folder, then renames it into place and writes `.gpufleet-ready` in it last; a
folder without that file is no environment. A job holds `.locks/<key>.use` (shared) while
it runs; eviction (least recently used first, past `--env-cache-size`) takes an env's use
lock exclusively without waiting, so an env in use is never removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import sysconfig
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import AgentError
from gpufleet.worker.job import PRIVATE_ENV

log = logging.getLogger(__name__)

ENVS_FOLDER = Path("cache") / "envs"
READY = ".gpufleet-ready"  # written last; holds the env's size in bytes
SOURCE = ".gpufleet-source"  # the file it was built from, kept for whoever looks
LOCK_POLL = 0.05  # seconds between tries of a lock another process holds
# The variables pip reads that uv has its own names for: honoured unless uv's are set.
PIP_TO_UV = {"PIP_INDEX_URL": "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL"}

# Runs argv (cwd, env) to its end, its output into the job's log: the exit code, and the
# last lines it printed; `EnvStopped` when the attempt is stopped meanwhile.
Run = Callable[[Sequence[str], Path, Mapping[str, str]], Awaitable[tuple[int, str]]]
Note = Callable[[str], None]  # a line of gpufleet's own in the job's log


class EnvFailed(AgentError):
    """uv could not build the job's environment: the attempt fails with uv's words."""


class EnvStopped(AgentError):
    """The attempt was stopped while its environment or setup was on its way."""


@dataclass(frozen=True)
class Source:
    """What an environment is built from: a file's name (`requirements.txt`,
    `pyproject.toml`) and its text."""

    name: str
    text: str

    def key(self, python: str | None = None, platform_tag: str | None = None) -> str:
        """The sha256 of the source, the Python version and the platform (this worker's
        unless given)."""
        here_python, here_platform = interpreter()
        blob = json.dumps(
            [self.name, self.text, python or here_python, platform_tag or here_platform],
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Lease:
    """An environment a job uses: kept (not evicted) until released."""

    path: Path
    key: str
    _fd: int | None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing it drops its lock
            self._fd = None


class EnvCache:
    def __init__(
        self,
        work_dir: Path,
        max_bytes: int,
        *,
        index_url: str | None = None,
        find_links: Sequence[str] = (),
    ) -> None:
        self.folder = work_dir / ENVS_FOLDER
        self.locks = self.folder / ".locks"
        self.uv_cache = work_dir / "cache" / "uv"
        self.max_bytes = max_bytes
        self.index_url = index_url
        self.find_links = tuple(find_links)

    async def lease(self, source: Source, run: Run, note: Note, stopped: asyncio.Event) -> Lease:
        """The environment for `source`, built unless it is ready; held until released."""
        key = source.key()
        self.locks.mkdir(parents=True, exist_ok=True)
        use = await _locked(self.locks / f"{key}.use", fcntl.LOCK_SH, stopped)
        try:
            build = await _locked(self.locks / f"{key}.build", fcntl.LOCK_EX, stopped)
            try:
                path = self.folder / key
                if (path / READY).is_file():
                    os.utime(path / READY)  # used now: the last to go
                    note(f"environment {key[:12]} is ready (cached)")
                else:
                    await self._build(source, path, run, note)
            finally:
                os.close(build)
        except BaseException:
            os.close(use)
            raise
        await asyncio.to_thread(self.evict, keep=key)
        return Lease(path, key, use)

    async def _build(self, source: Source, path: Path, run: Run, note: Note) -> None:
        started = time.monotonic()
        note(f"building environment {path.name[:12]} from {source.name} with uv")
        prefix = f".build-{path.name[:16]}-"
        for left in self.folder.glob(f"{prefix}*"):  # a dead builder's: we hold the key's lock
            await asyncio.to_thread(shutil.rmtree, left, True)
        temp = self.folder / f"{prefix}{uuid.uuid4().hex[:8]}"
        try:
            await self._fill(source, temp, run)
            await asyncio.to_thread(_put_in_place, temp, path)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        note(f"environment {path.name[:12]} ready in {time.monotonic() - started:.1f} s")

    async def _fill(self, source: Source, temp: Path, run: Run) -> None:
        uv = uv_binary()
        env = self.uv_environment(os.environ)
        venv = [uv, "venv", "--relocatable", "--python", sys.executable, str(temp)]
        code, tail = await run(venv, self.folder, env)
        if code != 0:
            raise EnvFailed(
                f"the environment could not be built: uv venv exited with code {code}:\n{tail}"
            )
        listed = temp / SOURCE / source.name
        listed.parent.mkdir()
        listed.write_text(source.text)
        install = [uv, "pip", "install", "--python", str(temp / "bin" / "python")]
        if self.index_url:  # in the environment: its credentials stay out of logged argvs
            env.pop("UV_DEFAULT_INDEX", None)
            env["UV_INDEX_URL"] = self.index_url
        for place in self.find_links:
            install += ["--find-links", place]
        code, tail = await run([*install, "-r", str(listed)], self.folder, env)
        if code != 0:
            raise EnvFailed(
                "the environment could not be built: uv pip install exited with code "
                f"{code}:\n{tail}"
            )

    async def exported(self, project: Path) -> str:
        """A uv.lock's packages as requirements (the project itself left out)."""
        argv = [uv_binary(), "export", "--frozen", "--no-hashes", "--no-emit-project"]
        process = await asyncio.create_subprocess_exec(
            *argv,
            "--format",
            "requirements-txt",
            cwd=project,
            env=self.uv_environment(os.environ),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        if process.returncode != 0:
            raise EnvFailed(
                f"the environment could not be built: uv export of {project.name}/uv.lock "
                f"failed:\n{err.decode(errors='replace')}"
            )
        return out.decode(errors="replace")

    def uv_environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """What uv runs with: the worker's environment (UV_* settings included), pip's index
        variables under uv's names, uv's cache in the work dir unless UV_CACHE_DIR says."""
        env = {k: v for k, v in base.items() if k not in PRIVATE_ENV}
        for pip, uv in PIP_TO_UV.items():
            if pip in base and uv not in base:
                env[uv] = base[pip]
        env.setdefault("UV_CACHE_DIR", str(self.uv_cache))
        env.update({"UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"})
        return env

    def evict(self, keep: str) -> list[str]:
        """Remove the least recently used environments, none in use, until the cache fits
        its bound; the keys removed."""
        held = []
        for path in self.folder.iterdir() if self.folder.is_dir() else ():
            try:
                held.append(((path / READY).stat().st_mtime, _recorded_size(path), path))
            except (FileNotFoundError, NotADirectoryError):
                continue
        total = sum(size for _, size, _ in held)
        removed = []
        for _, size, path in sorted(held):
            if total <= self.max_bytes:
                break
            if path.name != keep and self._remove_unused(path):
                total -= size
                removed.append(path.name)
                log.info("environment cache: removed %s (least recently used)", path.name[:12])
        return removed

    def _remove_unused(self, path: Path) -> bool:
        try:
            fd = os.open(self.locks / f"{path.name}.use", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False  # a job uses it
        try:
            (path / READY).unlink(missing_ok=True)  # no longer an environment, whatever follows
            trash = self.folder / f".gone-{uuid.uuid4().hex[:8]}"
            path.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        finally:
            os.close(fd)
        return True


async def _locked(path: Path, how: int, stopped: asyncio.Event) -> int:
    """An open descriptor of `path` holding its lock (`how`); waits, polling, while another
    holds it (cancellable, unlike a blocking `flock` in a thread)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return fd
            if stopped.is_set():
                raise EnvStopped("stopped while another job built its environment")
            await asyncio.sleep(LOCK_POLL)
    except BaseException:
        os.close(fd)
        raise


@functools.cache
def interpreter() -> tuple[str, str]:
    """This worker's Python (`cpython-3.11.7`) and platform (`linux-x86_64-glibc-2.36`): the
    environments it builds run on them."""
    python = f"{sys.implementation.name}-{platform.python_version()}"
    return python, f"{sysconfig.get_platform()}-{'-'.join(platform.libc_ver())}"


def uv_binary() -> str:
    try:
        import uv
    except ImportError as exc:
        raise EnvFailed(
            "uv is not installed beside this worker: install gpufleet with its dependencies"
        ) from exc
    return str(uv.find_uv_bin())


def _put_in_place(temp: Path, path: Path) -> None:
    (temp / READY).write_text(f"{_size_of(temp)}\n")
    if path.exists():  # a build that died before its rename left it
        shutil.rmtree(path, ignore_errors=True)
    temp.rename(path)


def _size_of(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _recorded_size(path: Path) -> int:
    text = (path / READY).read_text().strip()
    return int(text) if text.isdigit() else _size_of(path)
