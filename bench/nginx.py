"""nginx serving a folder on loopback with `sendfile on`: the yardstick of scenario 7's
downloads (#39 goal 4), the same file on the same machine as the orchestrator serves it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.server import free_port

CANDIDATES = ("nginx", "/usr/sbin/nginx")


class NginxUnavailable(RuntimeError):
    """No nginx on this machine, or it did not start."""


def nginx_binary() -> str:
    for name in CANDIDATES:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    raise NginxUnavailable("nginx is not installed (make system-packages installs it)")


def _config(root: Path, prefix: Path, port: int) -> str:
    # One process, no daemon: it runs as whoever started it (it reads the bench's files) and
    # stops with its process. Temporary paths inside the prefix: nothing outside is written.
    temps = " ".join(
        f"{name}_temp_path {prefix / name};" for name in ("client_body", "proxy", "fastcgi")
    )
    return f"""
daemon off;
master_process off;
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    {temps}
    uwsgi_temp_path {prefix / "uwsgi"};
    scgi_temp_path {prefix / "scgi"};
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


@contextlib.contextmanager
def nginx_serving(root: Path, prefix: Path) -> Iterator[str]:
    """nginx serving the files under `root` (its state under `prefix`); its base URL."""
    binary = nginx_binary()
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = prefix / "nginx.conf"
    config.write_text(_config(root.resolve(), prefix.resolve(), port))
    url = f"http://127.0.0.1:{port}"
    with subprocess.Popen(
        [binary, "-p", str(prefix), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as process:  # its pipe closed on the way out
        try:
            _wait_up(process, url)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_up(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise NginxUnavailable(f"nginx exited ({process.returncode}): {err[:300]}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{url}/", timeout=1)
            return
        time.sleep(0.05)
    raise NginxUnavailable("nginx did not answer within 10 s")
