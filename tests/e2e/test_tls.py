"""`gpufleet server --ssl` over real TLS sockets, with its own certificate or a private CA."""

from __future__ import annotations

import signal
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from gpufleet.server.tls import fingerprint
from tests.e2e.conftest import GPUFLEET, ServerProcess, WorkerProcess, serving, unique
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("tls"), None, ssl=True)


def test_ssl_makes_a_self_signed_certificate_and_prints_its_fingerprint(
    self_signed: ServerProcess,
) -> None:
    cert = self_signed.data_dir / "tls" / "cert.pem"
    key = self_signed.data_dir / "tls" / "key.pem"
    assert key.stat().st_mode & 0o077 == 0
    printed = fingerprint(cert.read_bytes())
    assert f"SHA-256 fingerprint: {printed}" in self_signed.log_path.read_text()
    with self_signed.admin() as admin:  # trusts exactly that certificate
        assert admin.get("/api/admin/workers").status_code == 200


def test_a_client_that_does_not_trust_the_certificate_is_refused(
    self_signed: ServerProcess,
) -> None:
    with pytest.raises(httpx.ConnectError) as info:
        httpx.get(f"{self_signed.url}/api/queue", timeout=5)
    assert isinstance(info.value.__context__, ssl.SSLCertVerificationError) or "CERTIFICATE" in str(
        info.value
    )


def test_the_certificate_is_reused_on_the_next_start(self_signed: ServerProcess) -> None:
    before = (self_signed.data_dir / "tls" / "cert.pem").read_bytes()
    self_signed.kill(signal.SIGTERM)
    self_signed.start()
    assert (self_signed.data_dir / "tls" / "cert.pem").read_bytes() == before


def test_a_worker_that_does_not_trust_the_certificate_gets_the_troubleshooting_advice(
    self_signed: ServerProcess, tmp_path: Path
) -> None:
    with self_signed.admin() as admin:
        token = admin.post("/api/admin/workers", json={"name": unique("w")}).json()["token"]
    run = subprocess.run(
        [
            GPUFLEET,
            "worker",
            "--orchestrator-url",
            self_signed.url,
            "--worker-token",
            token,
            "--work-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "SSL certificate verify failed" in run.stderr
    assert "--ca-cert" in run.stderr and "Traceback" not in run.stderr


def test_a_worker_trusting_a_private_ca_runs_a_job_over_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca_pem, cert_pem, key_pem = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_pem))
    leaf.private_key_pem.write_to_path(str(key_pem))
    for blob in leaf.cert_chain_pems:
        blob.write_to_path(str(cert_pem), append=True)
    server = ServerProcess(
        tmp_path / "server",
        None,
        ssl=True,
        **{"ssl-cert": cert_pem, "ssl-key": key_pem, "ca-for-tests": ca_pem},
    )
    server.start()
    try:
        tag = {"pool": unique("p")}
        (tmp_path / "workers").mkdir()
        worker = WorkerProcess(server, tmp_path / "workers", labels=tag).start()
        with server.admin() as admin:
            job = admin.post(
                "/api/queue/submit",
                json={
                    "config": {"command": ["python", "-c", "print('over tls')"]},
                    "worker_labels": tag,
                },
            ).json()
            done = wait_until(
                lambda: admin.get(f"/api/queue/{job['id']}").json()["status"] == "completed",
                timeout=15,
                message="the job to complete over TLS",
            )
            assert done
            lines = admin.get(f"/api/queue/{job['id']}/logs").json()["lines"]
        assert [line["text"] for line in lines] == ["over tls"]
        assert worker.proc is not None and worker.proc.wait(timeout=20) == 0  # ephemeral
    finally:
        server.kill(signal.SIGTERM)
