"""The object-storage backend for this folder's tests: moto's S3 server in a child process
(as in tests/api/test_artifact_store.py), and an orchestrator on each backend in turn."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.artifacts.uploads import new_bucket, start_fleet
from tests.api.conftest import Fleet


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto's S3 server did not serve on {endpoint}")
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


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
