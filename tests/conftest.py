"""Fixtures every tier may use: one database URL per storage backend.

`database_url` runs a test once on SQLite (a new file) and once on PostgreSQL (one database
per test module, emptied before each test, dropped at the module's end). PostgreSQL is
expected on 127.0.0.1:5432 with trust auth; a test that asks for it fails loudly when it is
not there, it never skips.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import hypothesis
import pytest
import pytest_asyncio

from tests.migrated import migrated_sqlite
from tests.oidc_provider import IdentityProvider, running_provider

# `gpufleet run` remembers the digests of folders it packed (cli/digests.py): in a temporary
# folder of its own, not in the home folder of whoever runs the tests.
# Removed when the test process exits (a run of `make test` left one a process behind).
if "GPUFLEET_CACHE_DIR" not in os.environ:
    os.environ["GPUFLEET_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpufleet-cli-cache-")
    atexit.register(shutil.rmtree, os.environ["GPUFLEET_CACHE_DIR"], ignore_errors=True)
# No deadline on a property test's examples: a deadline is a wall-clock assert, which a loaded
# 2-core machine breaks (a full run saw 429 ms against hypothesis's default 200 ms).
hypothesis.settings.register_profile("gpufleet", deadline=None)
hypothesis.settings.load_profile("gpufleet")
PG_HOST = os.environ.get("GPUFLEET_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("GPUFLEET_TEST_PG_PORT", "5432"))
PG_MAINTENANCE_DB = "test"
PG_USERS = ("root", "postgres")
START_PG = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

pytest_plugins = ["tests.cpu_usage"]  # off unless GPUFLEET_TEST_CPU is set


# The longest units of work first (their time in `make test`, measured with --junitxml), a unit
# that mostly waits (on timeouts, on the SimpleTuner agent's own pace) between units that keep a
# CPU busy. `make test` runs three units at a time on two cores (-n 3 --dist loadgroup
# --no-loadscope-reorder): so the CPUs compute while a unit waits, and no process is left
# running one long unit alone at the tail. A unit is a file, except the browser tier, which is
# one: one process runs every browser file in a row, on one Chromium and one server (their
# fixtures are the package's), while the two others compute; as files, the three processes
# reached the tier together and each started its own, all three waiting on pages at once. The
# rest keep their collection order.
BROWSER_TIER = "tests/browser/"
LONGEST_FIRST = (
    BROWSER_TIER,  # waits, on pages
    "tests/chaos/test_faults.py",  # waits
    "tests/e2e/test_artifacts_resume.py",  # waits
    "tests/e2e/test_schemathesis.py",
    "tests/api/test_dispatch.py",
    "tests/api/test_policy.py",
    "tests/e2e/test_sharing.py",  # waits
    "tests/bench/test_smoke.py",
    "tests/e2e/test_simpletuner_agent.py",  # waits
    "tests/api/test_people.py",
    "tests/api/test_failures.py",
    "tests/e2e/test_orchestrator.py",  # waits
    "tests/e2e/test_cli.py",
    "tests/api/test_input_property.py",
    "tests/e2e/test_replicas.py",  # waits
    "tests/e2e/test_worker_failover.py",  # waits
    "tests/chaos/test_preemption.py",  # waits
    "tests/e2e/test_cli_artifacts.py",
    "tests/api/test_simpletuner_storage.py",
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the browser tier."""
    path = nodeid.split("::", 1)[0]
    return BROWSER_TIER if path.startswith(BROWSER_TIER) else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadgroup`, pytest-xdist hands out the work units of `work_unit`. (Its own
    grouping, by `xdist_group` marks, did not group here: with pytest 9.2 and pytest-xdist
    3.8, two tests of one mark ran in two processes.)"""
    if config.getvalue("dist") != "loadgroup":
        return None  # pytest-xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))


async def _pg_admin_connection() -> tuple[asyncpg.Connection, str]:
    problems = []
    for user in PG_USERS:
        try:
            conn = await asyncpg.connect(
                host=PG_HOST, port=PG_PORT, user=user, database=PG_MAINTENANCE_DB, timeout=5
            )
        except (OSError, asyncpg.PostgresError) as exc:
            problems.append(f"{user}: {exc.__class__.__name__}: {exc}")
            continue
        return conn, user
    pytest.fail(
        f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT} (database {PG_MAINTENANCE_DB!r}, "
        f"trust auth; tried {'; '.join(problems)}). Start it with:\n    {START_PG}\n"
        "or deselect these tests with -m 'not postgres'.",
        pytrace=False,
    )


async def _create_database(conn: asyncpg.Connection) -> str:
    """A new database, named at random. Its commits do not wait for the disk: the tests check
    what the orchestrator stores and answers, not whether PostgreSQL outlives a power cut,
    and each commit's flush cost 2.5-4 ms on this machine (synchronous_commit; fsync stays
    on, so a crash loses at most the last commits, never the database's consistency)."""
    name = f"gf_{secrets.token_hex(6)}"
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    return name


async def _drop_database(conn: asyncpg.Connection, name: str) -> None:
    await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def _postgres_database() -> AsyncIterator[tuple[str, str]]:
    """One PostgreSQL database per test module, dropped at its end (creating one costs
    about half a second, emptying one a few milliseconds)."""
    conn, user = await _pg_admin_connection()
    name = ""
    try:
        name = await _create_database(conn)
        yield user, name
    finally:
        if name:
            await _drop_database(conn, name)
        await conn.close()


@pytest.fixture
async def postgres_url(_postgres_database: tuple[str, str]) -> str:
    """The module's PostgreSQL database, emptied: every table as a fresh one would be."""
    user, name = _postgres_database
    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=user, database=name)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables "
            "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
        )
        async with conn.transaction():
            for row in tables:
                await conn.execute(f'DELETE FROM "{row["tablename"]}"')
            if "queue_policy" in {row["tablename"] for row in tables}:
                await _seed_0014(conn)
    finally:
        await conn.close()
    return f"postgresql+asyncpg://{user}@{PG_HOST}:{PG_PORT}/{name}"


async def _seed_0014(conn: asyncpg.Connection) -> None:
    """What migration 0014 seeds: the queue policy's row and the built-in admin user."""
    await conn.execute(
        "INSERT INTO queue_policy (id, fair_share, half_life_s, preemption, min_runtime_s, "
        "preempt_grace_s, approve_levels) VALUES (1, false, 604800, false, 600, 120, "
        "'[\"viewer\"]')"
    )
    await conn.execute(
        "INSERT INTO users (id, name, level, usage, created_at) "
        "VALUES ('u_admin', 'admin', 'admin', 0, now())"
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file of the test's own, as a new file is once the orchestrator migrated it."""
    path = tmp_path / "gpufleet.db"
    shutil.copyfile(migrated_sqlite(), path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """The test runs once per storage backend."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new PostgreSQL database for one orchestrator (or its replicas), dropped afterwards."""

    async def create() -> tuple[str, str]:
        conn, user = await _pg_admin_connection()
        try:
            return user, await _create_database(conn)
        finally:
            await conn.close()

    async def drop(name: str) -> None:
        conn, _user = await _pg_admin_connection()
        try:
            await _drop_database(conn, name)
        finally:
            await conn.close()

    user, name = asyncio.run(create())
    try:
        yield f"postgresql+asyncpg://{user}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        asyncio.run(drop(name))


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards: for tests that start
    several orchestrator processes on it (replicas)."""
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3-compatible server, one a test process (each test makes a bucket of its own:
    `bench.s3.new_bucket`)."""
    from bench.s3 import moto_s3

    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def identity_provider() -> Iterator[IdentityProvider]:
    """A real OpenID Connect provider process (tests/oidc_provider.py)."""
    with running_provider() as provider:
        yield provider


@pytest.fixture(scope="session")
def device_identity_provider() -> Iterator[IdentityProvider]:
    """The provider with the device authorization grant (tests/oidc_device_provider.py)."""
    with running_provider("tests.oidc_device_provider") as provider:
        yield provider
