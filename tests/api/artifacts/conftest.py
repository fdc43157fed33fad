"""The object-storage backend for this folder's tests: moto's S3 server in a child process
(as in tests/api/test_artifact_store.py), and an orchestrator on each backend in turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.artifacts.uploads import new_bucket, start_fleet
from tests.api.conftest import Fleet


@pytest.fixture(params=["folder", "s3"])
async def any_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Fleet]:
    """The orchestrator on each backend: the data folder, then object storage."""
    url = None
    if request.param == "s3":
        url = new_bucket(request.getfixturevalue("s3_endpoint"), monkeypatch)
    fleet = await start_fleet(tmp_path, database_url, artifacts=url)
    try:
        yield fleet
    finally:
        await fleet.stop()
