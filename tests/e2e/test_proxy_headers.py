"""Behind a proxy the orchestrator audits and rate-limits the real client, and only a proxy
it trusts (`--forwarded-allow-ips`) may say who that is."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ServerProcess


def failed_registration_address(tmp_path: Path, **flags: str) -> str:
    server = ServerProcess(tmp_path / "orchestrator", None, **flags)
    server.start()
    try:
        answer = httpx.post(
            f"{server.url}/api/workers/register",
            json={"name": "x"},
            headers={"X-Worker-Token": "wt_guessed", "X-Forwarded-For": "203.0.113.7"},
        )
        assert answer.status_code == 401
        with server.admin() as admin:
            events = admin.get("/api/audit", params={"type": "worker.register_failed"}).json()
        return str(events["events"][0]["client_addr"])
    finally:
        server.kill(signal.SIGTERM)


def test_a_proxy_on_this_host_names_the_client_by_default(tmp_path: Path) -> None:
    assert failed_registration_address(tmp_path) == "203.0.113.7"


@pytest.mark.parametrize("trusted", ["10.9.9.9", "192.0.2.0/24"])
def test_an_untrusted_caller_cannot_choose_the_address_it_is_audited_under(
    tmp_path: Path, trusted: str
) -> None:
    address = failed_registration_address(tmp_path, **{"forwarded-allow-ips": trusted})
    assert address == "127.0.0.1"
