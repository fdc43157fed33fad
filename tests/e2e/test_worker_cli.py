"""`gpufleet worker` facing a user's mistakes: one line on stderr, exit 1, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.conftest import GPUFLEET, ServerProcess, free_port, serving


def run_worker(*args: str, env: dict[str, str] | None = None, cwd: Path) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "SIMPLETUNER_"))}
    done = subprocess.run(
        [GPUFLEET, "worker", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0].removeprefix("Error: ")


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("orchestrator"), None)


class NotHere(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.dumps({"detail": "not an orchestrator"}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An HTTPS server with a self-signed certificate: its URL and the certificate file."""
    if shutil.which("openssl") is None:
        pytest.skip("the TLS tests make their certificate with the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), NotHere)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", cert
    httpd.shutdown()
    httpd.server_close()


def test_a_refused_connection_says_what_to_check(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, stderr = run_worker("--orchestrator-url", url, "--worker-token", "wt_x", cwd=tmp_path)

    assert code == 1
    message = one_error_line(stderr)
    assert message.startswith("Connection refused: check the orchestrator URL and port")
    assert "--host 0.0.0.0" in message and url in message


def test_the_simpletuner_variables_are_read_as_aliases(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, stderr = run_worker(
        env={
            "SIMPLETUNER_ORCHESTRATOR_URL": url,
            "SIMPLETUNER_WORKER_TOKEN": "wt_x",
            "SIMPLETUNER_WORKER_PERSISTENT": "true",
        },
        cwd=tmp_path,
    )

    assert code == 1
    assert url in one_error_line(stderr)


def test_a_missing_url_or_token_names_the_flag_and_the_variable(tmp_path: Path) -> None:
    code, stderr = run_worker("--worker-token", "wt_x", cwd=tmp_path)
    assert code == 1
    assert one_error_line(stderr) == (
        "No orchestrator URL: pass --orchestrator-url or set GPUFLEET_ORCHESTRATOR_URL"
    )

    code, stderr = run_worker(env={"GPUFLEET_ORCHESTRATOR_URL": "http://127.0.0.1:1"}, cwd=tmp_path)
    assert code == 1
    assert "pass --worker-token or set GPUFLEET_WORKER_TOKEN" in one_error_line(stderr)


def test_a_wrong_token_is_refused_with_the_troubleshooting_advice(
    orchestrator: ServerProcess, tmp_path: Path
) -> None:
    code, stderr = run_worker(
        "--orchestrator-url",
        orchestrator.url,
        "--worker-token",
        "wt_not-a-real-token",
        cwd=tmp_path,
    )

    assert code == 1
    assert one_error_line(stderr) == (
        "Invalid token: it may have been rotated — request a new one; check for whitespace in "
        "the token string"
    )


def test_an_untrusted_certificate_points_to_ca_cert_and_ssl_no_verify(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = tls_server
    code, stderr = run_worker("--orchestrator-url", url, "--worker-token", "wt_x", cwd=tmp_path)

    assert code == 1
    message = one_error_line(stderr)
    assert message.startswith("SSL certificate verify failed: pass --ca-cert FILE")
    assert "--ssl-no-verify for self-signed certs (development only)" in message


def test_ca_cert_trusts_the_orchestrators_certificate(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, cert = tls_server
    code, stderr = run_worker(
        "--orchestrator-url", url, "--worker-token", "wt_x", "--ca-cert", str(cert), cwd=tmp_path
    )

    assert code == 1  # TLS passed; this server is simply not an orchestrator
    assert "(404): not an orchestrator" in one_error_line(stderr)


def test_ssl_no_verify_warns_loudly_and_skips_the_check(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = tls_server
    code, stderr = run_worker(
        "--orchestrator-url", url, "--worker-token", "wt_x", "--ssl-no-verify", cwd=tmp_path
    )

    assert code == 1
    warning, error = stderr.strip().splitlines()
    assert warning.startswith("WARNING: --ssl-no-verify") and "Development only" in warning
    assert error.startswith("Error: ") and "(404): not an orchestrator" in error


def test_gpus_naming_a_gpu_this_machine_lacks_is_refused(tmp_path: Path) -> None:
    code, stderr = run_worker(
        "--orchestrator-url",
        "http://127.0.0.1:1",
        "--worker-token",
        "wt_x",
        "--gpus",
        "0,7",
        cwd=tmp_path,
    )

    assert code == 1
    assert "--gpus names GPU" in one_error_line(stderr)
