"""Start and stop a real `gpufleet server` process, and watch what it costs."""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from gpufleet.client_tls import verify_for

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))
CODE_LINE = "gpufleet code:"
# `gpufleet ...` as the venv's script runs it, saying first which gpufleet it imported.
_LAUNCH = (
    "import sys, gpufleet; "
    f"print({CODE_LINE!r}, gpufleet.__file__, file=sys.stderr, flush=True); "
    "from gpufleet.cli.main import main; sys.argv[0] = 'gpufleet'; main()"
)


def gpufleet_command(code: Path | None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a `gpufleet` process the bench starts. `code`: the
    `src` folder of the checkout it runs (`--baseline`; the venv's Python and packages, that
    folder alone on PYTHONPATH, which comes before the venv's editable install); None: the
    venv's `gpufleet` script as the environment has it."""
    if code is None:
        return [GPUFLEET], dict(os.environ)
    return [sys.executable, "-c", _LAUNCH], {**os.environ, "PYTHONPATH": str(code)}


def loaded_from(log: Path) -> Path | None:
    """The gpufleet package a process started by `gpufleet_command(code)` imported, from the
    line it wrote first into its log."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(CODE_LINE):
            return Path(line[len(CODE_LINE) :].strip()).resolve()
    return None


def raise_fd_limit() -> int:
    """Soft file-descriptor limit up to the hard one; children (the server) inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def quiet_collector() -> None:
    """No automatic garbage collection in a harness process (the parent collects between
    scenarios): a full collection in a process holding a thousand simulated workers took
    70-360 ms, and the stamps it delayed were counted as the server's latency."""
    gc.collect()
    gc.disable()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Usage:
    """CPU seconds and resident memory of the server over a window."""

    cpu_seconds: float
    wall_seconds: float
    rss_bytes: int

    @property
    def cpu_share(self) -> float:
        """Fraction of the whole machine (all cores) the server used."""
        cores = psutil.cpu_count() or 1
        return self.cpu_seconds / self.wall_seconds / cores if self.wall_seconds else 0.0


class BenchServer:
    """One orchestrator process on a free port, with its own data folder."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None = None,
        profile: Path | None = None,
        code: Path | None = None,
        **flags: Any,
    ) -> None:
        self.data_dir = data_dir
        self.code = code  # the `src` folder the server runs (gpufleet_command)
        self.profile = profile  # py-spy's collapsed stacks of the server go here
        self._profiler: subprocess.Popen[bytes] | None = None
        self.database_url = database_url
        self.flags: dict[str, Any] = {
            "auth-failure-limit": 0,
            "log-level": "warning",
            **flags,
        }
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Where simulated workers connect: this server, or another replica of its database.
        self.worker_url = self.url
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"
        self._ps: psutil.Process | None = None
        self._mark: tuple[float, float] = (0.0, 0.0)
        self.others: list[BenchServer] = []  # the other replicas, measured beside this one

    def start(self) -> BenchServer:
        raise_fd_limit()
        launch, env = gpufleet_command(self.code)
        cmd = [*launch, "server", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir)]
        if self.database_url:
            cmd += ["--database-url", self.database_url]
        for name, value in self.flags.items():
            cmd += [f"--{name}", str(value)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        # One client for every poll, loading no CA bundle: a client made a poll loaded
        # certifi's (60 ms of CPU), ten times a second for the seconds a loaded machine takes
        # to start a server (#32).
        with httpx.Client(timeout=2, verify=verify_for([self.url], True)) as probe:
            while not self._ready(probe):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"server did not start; see {self.log_path}")
                time.sleep(0.1)
        self._check_code()
        self._ps = psutil.Process(self.proc.pid)
        if self.profile is not None:
            self._profiler = start_profiler(self.proc.pid, self.profile)
        self.mark()
        return self

    def _ready(self, probe: httpx.Client) -> bool:
        if self.proc is None:
            raise RuntimeError("the bench server was stopped while it started")
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"server exited early:\n{tail}")
        try:
            # Not /openapi.json: its first request builds the whole schema, CPU the server
            # would otherwise never spend.
            return probe.get(f"{self.url}/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def _check_code(self) -> None:
        """With `code`, the server answered from that checkout's package, or it stops here:
        a before/after of one code twice would read as a finding."""
        if self.code is None:
            return
        loaded = loaded_from(self.log_path)
        if loaded is None or not loaded.is_relative_to(self.code.resolve()):
            self.stop()
            raise RuntimeError(f"the server ran gpufleet from {loaded}, not from {self.code}")

    def stop(self) -> None:
        if self._profiler is not None:
            self._profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._profiler.wait(timeout=60)
            self._profiler = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    @property
    def admin_key(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def mark(self) -> None:
        """Start a measurement window for usage()."""
        times = self._process().cpu_times()
        self._mark = (times.user + times.system, time.monotonic())
        for other in self.others:
            other.mark()

    def usage(self) -> Usage:
        """CPU used since mark(), and resident memory now."""
        process = self._process()
        times = process.cpu_times()
        cpu0, t0 = self._mark
        return Usage(
            cpu_seconds=times.user + times.system - cpu0,
            wall_seconds=time.monotonic() - t0,
            rss_bytes=process.memory_info().rss,
        )

    def _process(self) -> psutil.Process:
        if self._ps is None:
            raise RuntimeError("the bench server has not started; measure after start()")
        return self._ps

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """Sample the server with py-spy until stopped; collapsed stacks in `out`."""
    beside = Path(sys.executable).with_name("py-spy")  # the dev extras install it there
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("--profile needs py-spy: make venv (the dev extras) installs it")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        spy,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "200",
        "--nonblocking",
        "--output",
        str(out),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def running_server(
    data_dir: Path,
    database_url: str | None = None,
    profile: Path | None = None,
    code: Path | None = None,
    **flags: Any,
) -> Iterator[BenchServer]:
    server = BenchServer(data_dir, database_url, profile, code, **flags).start()
    try:
        yield server
    finally:
        server.stop()


SHARED_FILES = ("admin.token", "audit.key", "ui-secret")  # docs/deploy.md


@contextlib.contextmanager
def running_replicas(
    data_dir: Path,
    database_url: str,
    profile: Path | None = None,
    count: int = 2,
    code: Path | None = None,
    **flags: Any,
) -> Iterator[BenchServer]:
    """`count` replicas on one PostgreSQL database. The one yielded takes the submits (and is
    the one measured and profiled); the simulated workers stream from the last one, so every
    offer crosses from one replica to another. With `profile`, every replica is sampled
    (`<name>-r1.txt` and on for the others)."""
    with running_server(data_dir / "r0", database_url, profile, code, **flags) as first:
        folders = [data_dir / f"r{n}" for n in range(1, count)]
        with joined(first, folders) as group:
            yield group


@contextlib.contextmanager
def joined(first: BenchServer, folders: list[Path]) -> Iterator[BenchServer]:
    """A replica of `first`'s PostgreSQL database started in each of `folders` (its flags and
    code), stopped after the block: `first` as the group's submit replica, a copy of it
    (`first` itself is left as it was) whose workers stream from the last one."""
    if first.database_url is None:
        raise RuntimeError("replicas share a PostgreSQL database; this server has none")
    group = copy.copy(first)
    group.others = []
    with contextlib.ExitStack() as stack:
        for n, folder in enumerate(folders, 1):
            folder.mkdir(parents=True)
            for name in SHARED_FILES:
                shutil.copy2(first.data_dir / name, folder / name)
            profile = first.profile
            also = profile.with_name(f"{profile.stem}-r{n}{profile.suffix}") if profile else None
            other = stack.enter_context(
                running_server(folder, first.database_url, also, first.code, **first.flags)
            )
            group.worker_url = other.url
            group.others.append(other)
        yield group


@contextlib.asynccontextmanager
async def fresh_postgres(server_url: str) -> AsyncIterator[str]:
    """A new database `gf_bench_<rand>` on the server of `server_url`, dropped afterwards."""
    url = make_url(server_url)
    name = f"gf_bench_{secrets.token_hex(5)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(
            host=url.host,
            port=url.port or 5432,
            user=url.username,
            password=url.password,
            database=url.database or "postgres",
            timeout=10,
        )
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    await admin(f"CREATE DATABASE {name}")
    try:
        yield url.set(drivername="postgresql+asyncpg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        await admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
