"""What a pool's provider tells a launched worker, and the local provider's instance ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ProviderError
from gpufleet.server.providers import WorkerLaunch, inherited_environment
from gpufleet.server.providers.local import _pid


def test_a_launched_worker_is_given_the_settings_gpufleet_worker_reads() -> None:
    spec = WorkerLaunch("http://127.0.0.1:8001", "wt_x", "burst-1", False, "burst", Path("/w"))
    assert spec.environment() == {
        "GPUFLEET_ORCHESTRATOR_URL": "http://127.0.0.1:8001",
        "GPUFLEET_WORKER_TOKEN": "wt_x",
        "GPUFLEET_WORKER_NAME": "burst-1",
        "GPUFLEET_WORKER_PERSISTENT": "0",
        "GPUFLEET_POOL": "burst",
    }
    tls = WorkerLaunch("https://h", "wt_x", "n", True, "p", Path("/w"), Path("/ca.pem"))
    assert tls.environment()["GPUFLEET_CA_CERT"] == "/ca.pem"
    assert tls.environment()["GPUFLEET_WORKER_PERSISTENT"] == "1"


def test_a_local_instance_id_names_its_process_and_nothing_else_is_taken_for_one() -> None:
    assert _pid("local-4242-9f0e1d2c") == 4242
    for other in ("4242", "local-", "local-x-1", "fake-1"):
        with pytest.raises(ProviderError):
            _pid(other)


def test_local_workers_and_commands_inherit_the_environment_less_the_orchestrators_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql://fleet:secret@db/fleet")
    monkeypatch.setenv("GPUFLEET_CA_CERT", "/etc/fleet/ca.pem")
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    passed = inherited_environment()
    assert "GPUFLEET_DATABASE_URL" not in passed
    assert passed["GPUFLEET_CA_CERT"] == "/etc/fleet/ca.pem"  # a worker's setting
    assert passed["CUDA_HOME"] == "/usr/local/cuda"
