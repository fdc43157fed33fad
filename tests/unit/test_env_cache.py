"""The worker's environment cache (worker/env_cache.py): the key, one build for jobs that
need the same env at once, uv's own words when it fails, LRU eviction sparing an env in use.

uv installs from a wheelhouse each test writes itself (tests/wheelhouse.py): no index is
reachable, nothing is downloaded."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gpufleet.worker.env_cache import READY, EnvCache, EnvFailed, Source
from tests.wheelhouse import PACKAGE, offline_env, write_wheel


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("UV_", "PIP_")):
            monkeypatch.delenv(name)
    for name, value in offline_env(tmp_path / "uv-cache", {}).items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "wheels"
    write_wheel(folder)
    write_wheel(folder, name="gpufleet_otherpkg", value="7")
    return folder


class Runs:
    """Runs uv as the worker does, counting the builds and keeping their output."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.lines: list[str] = []

    async def __call__(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]
    ) -> tuple[int, str]:
        self.argvs.append(list(argv))
        self.envs.append(dict(env))
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await process.communicate()
        self.lines += out.decode().splitlines()
        return process.returncode or 0, out.decode()

    @property
    def venvs(self) -> int:
        return sum(1 for argv in self.argvs if argv[1] == "venv")


def quiet(_: str) -> None:
    pass


def cache_in(tmp_path: Path, wheels: Path, max_bytes: int = 10**12) -> EnvCache:
    return EnvCache(tmp_path / "work", max_bytes, find_links=[str(wheels)])


def imports(lease_path: Path, package: str = PACKAGE) -> str:
    python = lease_path / "bin" / "python"
    code = f"import {package}; print({package}.VALUE)"
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_key_is_the_requirements_the_python_and_the_platform() -> None:
    source = Source("requirements.txt", "numpy==2.0\n")
    assert source.key() == Source("requirements.txt", "numpy==2.0\n").key()
    assert source.key() != Source("requirements.txt", "numpy==2.1\n").key()
    assert source.key() != Source("pyproject.toml", "numpy==2.0\n").key()
    assert source.key() != source.key(python="cpython-3.12.1")
    assert source.key() != source.key(platform_tag="macosx-14.0-arm64")
    assert len(source.key()) == 64


async def test_two_jobs_needing_one_env_at_once_build_it_once_and_share_it(
    tmp_path: Path, wheels: Path
) -> None:
    cache = cache_in(tmp_path, wheels)
    runs, stop = Runs(), asyncio.Event()
    source = Source("requirements.txt", f"{PACKAGE}==1.0\n")
    notes: list[str] = []
    dead = cache.folder / f".build-{source.key()[:16]}-deadbeef"  # a builder that died
    (dead / "bin").mkdir(parents=True)
    first, second = await asyncio.gather(
        cache.lease(source, runs, notes.append, stop),
        cache.lease(source, runs, notes.append, stop),
    )
    assert first.path == second.path == cache.folder / source.key()
    assert runs.venvs == 1  # one build; the other job waited for it, then found it ready
    assert any("ready (cached)" in note for note in notes)
    assert imports(first.path) == "42"
    assert [p.name for p in cache.folder.iterdir() if not p.name.startswith(".")] == [source.key()]
    assert not [p for p in cache.folder.iterdir() if p.name.startswith(".build")]  # swept too
    first.release()
    second.release()


async def test_a_requirement_uv_cannot_meet_fails_with_uvs_words_and_leaves_nothing(
    tmp_path: Path, wheels: Path
) -> None:
    cache = cache_in(tmp_path, wheels)
    runs = Runs()
    with pytest.raises(EnvFailed) as failed:
        await cache.lease(
            Source("requirements.txt", "no-such-package-anywhere==9.9\n"),
            runs,
            quiet,
            asyncio.Event(),
        )
    assert "the environment could not be built: uv pip install exited with code" in str(
        failed.value
    )
    assert "no-such-package-anywhere" in str(failed.value)  # uv's own explanation
    assert [p.name for p in cache.folder.iterdir()] == [".locks"]  # no env, no half-built one


async def test_the_least_recently_used_env_goes_first_and_one_in_use_stays(
    tmp_path: Path, wheels: Path
) -> None:
    cache = cache_in(tmp_path, wheels)
    runs, stop = Runs(), asyncio.Event()
    old = await cache.lease(Source("requirements.txt", f"{PACKAGE}\n"), runs, quiet, stop)
    old.release()
    used = await cache.lease(Source("requirements.txt", "gpufleet_otherpkg\n"), runs, quiet, stop)
    os.utime(old.path / READY, (1, 1))  # the first used longest ago
    os.utime(used.path / READY, (2, 2))  # and the one in use older still than the newest
    cache.max_bytes = 1  # nothing fits now
    newest = await cache.lease(Source("requirements.txt", f"{PACKAGE}==1.0\n"), runs, quiet, stop)
    assert not old.path.exists()  # least recently used, unused: gone
    assert used.path.is_dir() and imports(used.path, "gpufleet_otherpkg") == "7"  # in use: kept
    assert newest.path.is_dir()  # the one just leased stays, even alone over the bound
    used.release()
    assert cache.evict(keep=newest.key) == [used.key]
    newest.release()


def test_uv_runs_with_the_workers_index_settings_and_without_its_token(tmp_path: Path) -> None:
    cache = EnvCache(tmp_path, 1)
    env = cache.uv_environment(
        {
            "PIP_INDEX_URL": "https://pip.example/simple",
            "PIP_EXTRA_INDEX_URL": "https://extra.example/simple",
            "UV_EXTRA_INDEX_URL": "https://uv-wins.example/simple",
            "UV_FIND_LINKS": "/wheels",
            "GPUFLEET_WORKER_TOKEN": "wt_secret",
            "PATH": "/usr/bin",
        }
    )
    assert env["UV_INDEX_URL"] == "https://pip.example/simple"  # pip's, under uv's name
    assert env["UV_EXTRA_INDEX_URL"] == "https://uv-wins.example/simple"  # uv's own wins
    assert env["UV_FIND_LINKS"] == "/wheels"
    assert env["UV_CACHE_DIR"] == str(tmp_path / "cache" / "uv")  # in the work dir
    assert "GPUFLEET_WORKER_TOKEN" not in env
    assert cache.uv_environment({"UV_CACHE_DIR": "/elsewhere"})["UV_CACHE_DIR"] == "/elsewhere"


async def test_the_workers_index_url_and_find_links_reach_uv(tmp_path: Path, wheels: Path) -> None:
    index = "http://user:token@127.0.0.1:9/simple"
    cache = EnvCache(tmp_path / "work", 10**12, index_url=index, find_links=[str(wheels)])
    runs = Runs()
    lease = await cache.lease(Source("requirements.txt", PACKAGE), runs, quiet, asyncio.Event())
    at = next(n for n, argv in enumerate(runs.argvs) if argv[1:3] == ["pip", "install"])
    assert runs.envs[at]["UV_INDEX_URL"] == index
    assert not any("token" in arg for argv in runs.argvs for arg in argv)  # argvs are logged
    install = runs.argvs[at]
    assert install[install.index("--find-links") + 1] == str(wheels)
    assert imports(lease.path) == "42"
    lease.release()
