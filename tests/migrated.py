"""A SQLite file with every migration applied, made once a test process: a copy is what a new
file becomes at the orchestrator's first start. The API tier's apps and the e2e tier's servers
start on copies (the migrations, and loading Alembic for them, took most of an in-process
orchestrator's start and a fifth of a `gpufleet server`'s, #32); the first start's own
migrating is tested where it is the subject (tests/unit/test_sqlite_store.py, tests/install)."""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
from pathlib import Path


@functools.cache
def migrated_sqlite() -> Path:
    from gpufleet.store import open_store

    folder = Path(tempfile.mkdtemp(prefix="gpufleet-migrated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "gpufleet.db"

    async def migrate() -> None:
        store = await open_store(f"sqlite+aiosqlite:///{path}", lock=False)
        await store.close()  # its last checkpoint folds the log into the file

    asyncio.run(migrate())
    return path
