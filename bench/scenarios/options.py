"""The sizes the scenarios run at, and the options every scenario is given."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.server import BenchServer, fresh_postgres, joined, running_replicas, running_server
from gpufleet.errors import ConfigurationError


@dataclass(frozen=True)
class Size:
    name: str
    s1_workers: int = 1000
    s1_jobs: int = 2000
    s2_workers: int = 1000
    s2_jobs: int = 20_000
    s2_concurrency: int = 32
    s2_deadline: float = 300.0
    s3_workers: int = 10_000
    s3_intervals: tuple[float, float] = (30.0, 3.0)
    s3_windows: tuple[float, float] = (65.0, 30.0)
    s3_connect_within: float = 600.0  # then measure with the workers streaming by then
    s4_depth: int = 100_000
    s4_budget: float = 180.0  # seconds of submitting on the deep queue
    s5_workers: int = 200
    s5_busy: int = 100
    s5_timeouts: tuple[float, float] = (5.0, 1.0)  # heartbeat timeout, health interval
    s7_bytes: int = 1024**3  # the checkpoint file of scenario 7
    s7_runs: int = 3  # scenario 7: curl and CLI downloads timed (the median is kept)
    s7_resume_bytes: int = 5 * 1024**3  # scenario 7: the checkpoint a worker resumes from
    s8_teams: int = 50  # scenario 8: the teams scenario 4's deep queue is spread over
    s8_latency_jobs: int = 500  # scenario 8, each mode: scenario 1's submits
    s8_jobs: int = 5000  # scenario 8, each mode: scenario 2's
    s8_connect_within: float = 120.0  # scenario 8: a mode whose fleet is not streaming by then
    s9_bytes: int = 100 * 1024**2  # scenario 9: the workdir's files
    s9_runs: int = 3  # scenario 9: timed runs of each kind (empty, cold, warm)
    s10_workers: int = 1000  # scenario 10: gangs among one-node jobs
    s10_nodes: tuple[int, ...] = (2, 8, 32)  # the gang sizes, submitted in turn
    s10_gangs: int = 30  # gangs of each size
    s10_singles: int = 8  # one-node jobs in flight alongside
    s11_launches: int = 10  # scenario 11: a pool's launches, one job each, one at a time
    s12_runs: int = 60  # scenario 12: the pools' decision, timed runs of each fleet
    # The floor of #19's per-job goals (bench.ceiling: an empty endpoint, the workers'
    # client), measured once a run on the quiet box after the first throughput scenario.
    floor_seconds: float = 10.0
    floor_processes: int = 4
    per_process: int = 2500
    start_within: float = 900.0


FULL = Size("full")
# Each scenario end to end, its checks computed, at the least work that still exercises every
# step (tests/bench/test_smoke.py; #32: its CPU is the test suite's). What a smoke run costs
# is mostly fixed: a server start (2 CPU-s), a process of simulated workers (1 CPU-s); jobs
# cost milliseconds each. So fleets of 4 share one process (`per_process`), and those of 6
# (scenarios 5 and 10) take two, which keeps the steering of several processes (a kill routed
# to the process that owns the worker) in every run; and scenarios share servers where they
# allow it (`ServerPool`), and a SQLite server starts on a migrated copy (`sqlite_seed`).
SMOKE = Size(
    "smoke",
    s1_workers=4,
    s1_jobs=4,
    s2_workers=4,
    s2_jobs=10,
    s2_concurrency=4,
    s2_deadline=60.0,
    s3_workers=4,
    s3_intervals=(1.0, 0.3),
    s3_windows=(1.2, 1.0),
    s3_connect_within=60.0,
    s4_depth=50,
    s5_workers=6,
    s5_busy=4,
    s5_timeouts=(2.0, 0.5),
    s7_bytes=2 * 1024**2,  # two of the upload's 1 MiB reads: still a stream, not one write
    s7_runs=1,
    s7_resume_bytes=2 * 1024**2,
    s8_teams=3,
    s8_latency_jobs=4,
    s8_jobs=10,
    s8_connect_within=60.0,
    s9_bytes=64 * 1024,
    s9_runs=1,
    s10_workers=6,
    s10_nodes=(2,),
    s10_gangs=2,
    s10_singles=2,
    s11_launches=1,
    s12_runs=3,
    floor_seconds=0.5,
    floor_processes=1,
    per_process=5,
    start_within=60.0,
)
# A tenth of the work at the full fleet sizes: minutes, not an hour.
MEDIUM = Size(
    "medium",
    s1_jobs=200,
    s2_jobs=2000,
    s2_deadline=300.0,
    s3_workers=2000,
    s3_windows=(35.0, 15.0),
    s4_depth=20_000,
    s7_bytes=256 * 1024**2,
    s7_resume_bytes=1024**3,
    s9_bytes=25 * 1024**2,
)
SIZES = {"full": FULL, "medium": MEDIUM, "smoke": SMOKE}


@dataclass
class Options:
    size: Size
    # None: SQLite in each server's data folder. A PostgreSQL URL: each scenario gets a
    # fresh database on that server, dropped afterwards.
    database_url: str | None = None
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gf-bench-")))
    profile_dir: Path | None = None  # py-spy stacks of each scenario's server
    replicas: int = 1  # above 1: that many servers on the PostgreSQL database (scenario 6)
    # Scenario 1 again with one job in the fleet at a time (scenario 6: the latency of the
    # way to a worker, one replica against two, without the backlog of a saturated box).
    paced: bool = False
    # None (the benchmark): every scenario gets a server of its own, so that what one leaves
    # behind is not another's cost. A pool (the smoke tests): `server` without flags hands out
    # the pool's server of that database and replica count, a start spared (#32).
    servers: ServerPool | None = None
    # The `src` folder of the checkout every `gpufleet` process the scenario starts runs
    # (`--baseline`: bench.server.gpufleet_command); None: the venv's `gpufleet` as it is.
    code: Path | None = None
    # A SQLite file every migration was applied to, copied into each SQLite server's data
    # folder of this checkout's code before its start: no scenario measures a first start's
    # migrating (the smoke tests: tests/migrated.py, #32). None: each server migrates its own.
    sqlite_seed: Path | None = None

    @property
    def database(self) -> str:
        name = "postgresql" if self.database_url else "sqlite"
        return f"{name} x{self.replicas}" if self.replicas > 1 else name

    def data_dir(self, scenario: str) -> Path:
        return self.work_dir / f"{scenario}-{self.database}-{secrets.token_hex(3)}"

    @contextlib.asynccontextmanager
    async def server(self, scenario: str, **flags: Any) -> AsyncIterator[BenchServer]:
        """A server for one scenario: its own, or (no flags, a pool given) the pool's, which
        other scenarios have used and will use: for a scenario whose figures and checks take
        no notice of other scenarios' workers and jobs."""
        if self.servers is None or flags:
            async with self.own_server(scenario, **flags) as server:
                yield server
            return
        server = await self.servers.get(self, scenario)
        server.mark()
        yield server

    @contextlib.asynccontextmanager
    async def own_server(self, scenario: str, **flags: Any) -> AsyncIterator[BenchServer]:
        """A server of its own for one scenario, on SQLite or a fresh PostgreSQL database."""
        async with contextlib.AsyncExitStack() as stack:
            url = None
            if self.database_url:
                url = await stack.enter_async_context(fresh_postgres(self.database_url))
            profile = None
            if self.profile_dir is not None:
                profile = self.profile_dir / f"{scenario}-{self.database}.txt"
            data_dir = self.data_dir(scenario)
            if url is None and self.sqlite_seed is not None and self.code is None:
                data_dir.mkdir(parents=True)
                shutil.copyfile(self.sqlite_seed, data_dir / "gpufleet.db")
            if self.replicas > 1:
                if url is None:
                    raise ConfigurationError("replicas share a PostgreSQL database: pass one")
                yield stack.enter_context(
                    running_replicas(data_dir, url, profile, self.replicas, self.code, **flags)
                )
            else:
                yield stack.enter_context(
                    running_server(data_dir, url, profile, self.code, **flags)
                )


class ServerPool:
    """Servers kept running across scenarios, one a database, replica count and code, each
    started on first use (replicas beside the one server of their database) with `flags`;
    all stopped by `aclose`."""

    def __init__(self, **flags: Any) -> None:
        self._flags = flags  # every pool server's (the smoke tests': a shorter pool loop)
        self._stack = contextlib.AsyncExitStack()
        self._servers: dict[tuple[str | None, int, Path | None], BenchServer] = {}

    async def get(self, opts: Options, scenario: str) -> BenchServer:
        """The pool's server for `opts`; replicas join the pool's one server of that database
        where it has one (scenario 6: one replica, then two), a start spared."""
        key = (opts.database_url, opts.replicas, opts.code)
        one = self._servers.get((opts.database_url, 1, opts.code))
        if key in self._servers:
            pass
        elif opts.replicas > 1 and one is not None:
            folders = [opts.data_dir(f"{scenario}-r{n}") for n in range(1, opts.replicas)]
            self._servers[key] = self._stack.enter_context(joined(one, folders))
        else:
            started = opts.own_server(scenario, **self._flags)
            self._servers[key] = await self._stack.enter_async_context(started)
        return self._servers[key]

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._servers.clear()
