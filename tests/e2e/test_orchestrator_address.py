"""Where the orchestrator is, with real processes: the CLI on its machine finds it on whatever
port it listens (#15.11), and worker commands name the address workers reach it at (#15.12)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.commands import environment, gpufleet, gpufleet_process
from tests.e2e.conftest import ServerProcess, unique

PUBLIC_URL = "http://gpu-head.example.com:9000"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder like a `make up` checkout: the server's data in ./.gpufleet."""
    return tmp_path_factory.mktemp("checkout")


@pytest.fixture(scope="module")
def server(checkout: Path) -> Iterator[ServerProcess]:
    env = {**os.environ, "GPUFLEET_PUBLIC_URL": PUBLIC_URL}  # the flag's environment variable
    proc = ServerProcess(checkout / ".gpufleet", None, env=env, **{"heartbeat-timeout": 120})
    proc.start()  # on a free port, never 8001
    yield proc
    proc.kill(signal.SIGTERM)


def cli_env() -> dict[str, str]:
    """As typed on the orchestrator's machine: no URL, no key, no GPUFLEET_* but the tests'
    cache folder (conftest's, not ~)."""
    return environment(GPUFLEET_CACHE_DIR=os.environ["GPUFLEET_CACHE_DIR"])


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGS` in `cwd` (in this process: tests/e2e/commands.py)."""
    return gpufleet(*args, env=cli_env(), cwd=cwd)


def test_the_server_leaves_its_address_next_to_the_admin_key(server: ServerProcess) -> None:
    left = json.loads((server.data_dir / "server.json").read_text())

    assert left == {"url": server.url, "public_url": PUBLIC_URL}


def test_the_cli_in_the_checkout_calls_the_port_the_server_listens_on(
    server: ServerProcess, checkout: Path
) -> None:
    assert server.port != 8001

    result = run(checkout, "workers", "list", "--json")

    assert result.returncode == 0, result.stderr
    assert "workers" in json.loads(result.stdout)


def test_an_explicit_url_still_wins_over_the_data_dir(
    server: ServerProcess, checkout: Path
) -> None:
    result = run(checkout, "workers", "list", "--url", "http://127.0.0.1:9", "--json")

    assert result.returncode == 1
    assert "127.0.0.1:9" in result.stderr


def test_workers_create_pastes_the_public_url_and_the_orchestrators_own_gpufleet(
    server: ServerProcess, checkout: Path
) -> None:
    name = unique("pasted")

    result = run(checkout, "workers", "create", name)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    anywhere, here = [shlex.split(line) for line in lines if "--worker-token" in line]
    assert anywhere[:2] == ["gpufleet", "worker"]
    assert anywhere[anywhere.index("--orchestrator-url") + 1] == PUBLIC_URL
    assert Path(here[0]).is_absolute() and Path(here[0]).is_file() and here[1] == "worker"
    assert here[2:] == anywhere[2:]


def test_a_public_url_that_is_not_http_stops_the_server_in_one_line(tmp_path: Path) -> None:
    result = gpufleet_process(
        "server", "--public-url", "gpu-head:8001", "--port", "0", env=cli_env(), cwd=tmp_path
    )

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "--public-url" in line and "http://" in line


def test_workers_list_and_show_say_a_worker_never_connected(
    server: ServerProcess, checkout: Path
) -> None:
    """As the Workers page does (#15.3): not "connecting"."""
    name = unique("idle-token")
    created = json.loads(run(checkout, "workers", "create", name, "--json").stdout)

    listed = run(checkout, "workers", "list")
    shown = run(checkout, "workers", "show", created["worker_id"])

    (row,) = [line for line in listed.stdout.splitlines() if name in line]
    assert "never connected" in row and "connecting" not in row
    assert "never connected" in shown.stdout
