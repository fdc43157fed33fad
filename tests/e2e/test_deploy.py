"""docs/deploy.md, followed: two replicas on PostgreSQL behind Debian's nginx, TLS terminated
by nginx with the guide's configuration, and a real `gpufleet worker` that survives the
loss of the replica holding its stream, without running its job twice."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.e2e.conftest import (
    ServerProcess,
    WorkerProcess,
    free_port,
    start_replicas,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def guide_nginx_block() -> str:
    """The nginx configuration of docs/deploy.md, as written there."""
    blocks = re.findall(r"```nginx\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/deploy.md should hold one nginx configuration"
    return re.sub(r"^ {3}", "", blocks[0], flags=re.M)  # it sits in a numbered list


class Nginx:
    """nginx in the foreground on a free port, with everything under one folder."""

    def __init__(self, root: Path, upstreams: list[ServerProcess], cert: Path, key: Path) -> None:
        self.root = root
        self.port = free_port()
        block = guide_nginx_block()
        servers = "".join(
            f"    server 127.0.0.1:{u.port} max_fails=1 fail_timeout=5s;\n" for u in upstreams
        )
        block, count = re.subn(r"(?m)^    server 10\.0\.0\.\d+:8001.*\n", "", block)
        assert count == 2, "the guide's upstream should list two replicas"
        block = block.replace("upstream gpufleet {\n", "upstream gpufleet {\n" + servers)
        block = block.replace("listen 443 ssl;", f"listen 127.0.0.1:{self.port} ssl;")
        block = block.replace("/etc/ssl/gpufleet/fullchain.pem", str(cert))
        block = block.replace("/etc/ssl/gpufleet/privkey.pem", str(key))
        for folder in ("client", "proxy", "fastcgi", "uwsgi", "scgi"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        self.conf = root / "nginx.conf"
        self.conf.write_text(
            f"pid {root}/nginx.pid;\nerror_log {root}/error.log info;\n"
            "events { worker_connections 256; }\n"
            "http {\n"
            f"  access_log {root}/access.log;\n"
            f"  client_body_temp_path {root}/client;\n  proxy_temp_path {root}/proxy;\n"
            f"  fastcgi_temp_path {root}/fastcgi;\n  uwsgi_temp_path {root}/uwsgi;\n"
            f"  scgi_temp_path {root}/scgi;\n"
            f"{block}}}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        check = subprocess.run(
            [NGINX, "-t", "-p", str(self.root), "-c", str(self.conf)], capture_output=True
        )
        assert check.returncode == 0, check.stderr.decode()
        self.proc = subprocess.Popen(
            [NGINX, "-p", str(self.root), "-c", str(self.conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Front:
    """What `WorkerProcess` needs of an orchestrator, here nginx's TLS address."""

    tls = True

    def __init__(self, nginx: Nginx, ca: Path, replica: ServerProcess) -> None:
        self.url = f"https://127.0.0.1:{nginx.port}"
        self.trusted_cert = ca
        self._replica = replica
        self.verify = ssl.create_default_context(cafile=ca)

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=10,
            verify=self.verify,
            headers={"Authorization": f"Bearer {self._replica.admin_key}"},
        )


@pytest.fixture
def deployment(tmp_path: Path, pg_database: str) -> Iterator[tuple[list[ServerProcess], Front]]:
    if not Path(NGINX).exists():
        pytest.fail("nginx is missing: `make test` installs Debian's nginx (apt-get install nginx)")
    tls = tmp_path / "tls"
    tls.mkdir()
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tls / "chain.pem"))
    cert.private_key_pem.write_to_path(str(tls / "key.pem"))
    ca.cert_pem.write_to_path(str(tls / "ca.pem"))
    with contextlib.ExitStack() as stack:
        replicas = start_replicas(tmp_path, pg_database, 2)
        for replica in replicas:
            stack.callback(replica.kill, signal.SIGTERM)
        nginx = Nginx(tmp_path / "nginx", replicas, tls / "chain.pem", tls / "key.pem")
        stack.callback(nginx.stop)
        nginx.start()
        front = Front(nginx, tls / "ca.pem", replicas[0])
        wait_until(lambda: _serves(front), timeout=10, message="nginx to serve")
        yield replicas, front


def _serves(front: Front) -> bool:
    try:
        return httpx.get(f"{front.url}/readyz", verify=front.verify, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def holder_of_streams(replicas: list[ServerProcess]) -> ServerProcess | None:
    held = [r for r in replicas if r.proc is not None and _metric(r, "gpufleet_worker_streams")]
    return held[0] if len(held) == 1 else None


def _metric(replica: ServerProcess, name: str) -> float:
    with replica.admin() as admin:
        for line in admin.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} missing from {replica.url}/metrics")


def test_a_worker_behind_nginx_survives_the_loss_of_the_replica_holding_its_stream(
    deployment: tuple[list[ServerProcess], Front], tmp_path: Path
) -> None:
    replicas, front = deployment
    labels = {"pool": unique("deploy")}
    worker = WorkerProcess(front, tmp_path, persistent=True, labels=labels)
    worker.start()
    try:
        holder = wait_until(lambda: holder_of_streams(replicas), timeout=10, message="one stream")
        # A job that outlives the replica: it starts, its replica dies, it ends elsewhere
        # (once the file `gate` appears, after its stream has moved).
        gate = tmp_path / "gate"
        script = (
            f"import os, time\nprint('working', flush=True)\n"
            f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\nprint('done')"
        )
        job_id = submit_job(front, labels, [sys.executable, "-c", script])
        wait_job(front, job_id, "running")

        holder.kill(signal.SIGKILL)

        survivor = next(r for r in replicas if r is not holder)
        wait_until(lambda: holder_of_streams([survivor]), timeout=20, message="the stream to move")
        gate.touch()
        done: dict[str, Any] = wait_job(front, job_id, "completed", timeout=30)
        assert [a["status"] for a in done["attempt_history"]] == ["completed"]
        assert worker.running()

        again = submit_job(front, labels, [sys.executable, "-c", "print('again')"])
        wait_job(front, again, "completed", timeout=20)
    finally:
        worker.stop()
