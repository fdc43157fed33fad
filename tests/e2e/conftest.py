"""Real `gpufleet server` processes on free ports, and helpers to talk to them."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest

from tests.conftest import fresh_database
from tests.e2e.local_workers import stop_all
from tests.migrated import migrated_sqlite
from tests.waiting import wait_until

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@functools.cache
def default_tls() -> ssl.SSLContext:
    """httpx's default verification (certifi's CAs), made once. A client given no context
    makes its own, loading the CA bundle: about 25 ms of CPU, paid on every poll of
    `wait_until` by the helpers that open a client per request."""
    return ssl.create_default_context(cafile=certifi.where())


@functools.cache
def trusting(cafile: Path, mtime_ns: int) -> ssl.SSLContext:
    """A context that trusts this certificate (or CA), made once per version of the file."""
    return ssl.create_default_context(cafile=cafile)


class ServerProcess:
    """One orchestrator process; restartable on the same data folder and database."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None,
        *,
        executable: str = GPUFLEET,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        migrate_at_start: bool = False,
        **flags: Any,
    ) -> None:
        self.data_dir = data_dir
        self.database_url = database_url
        # On SQLite in its data folder, it first starts on a copy of a migrated file (what its
        # own first start makes of a new one: tests/migrated.py), unless the first start's
        # migrating is what is tested, or it is another installation's `gpufleet`.
        self.migrate_at_start = migrate_at_start or executable != GPUFLEET
        # What it listens on and is reached at: another address where other machines reach
        # it (a network namespace's bridge, tests/netns.py).
        self.host = host
        # Another installation's `gpufleet` and environment (tests/install); None: inherit ours.
        self.executable = executable
        self.env = env
        # Short enough to test timeouts in seconds, long enough for a loaded 2-core machine.
        self.flags = {
            "heartbeat-timeout": 3,
            # Sweeps twice a second: an idle server's sweeps cost a core 3 % at 0.25 s, and
            # a test process keeps one or two alive all along (#32); lost workers are still
            # found within a heartbeat timeout and a half-second.
            "health-interval": 0.5,
            "ack-timeout": 3,
            "heartbeat-interval": 0.5,
            "auth-failure-limit": 1000,
            **flags,
        }
        self.port = free_port(host)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"

    @property
    def tls(self) -> bool:
        return bool(self.flags.get("ssl"))

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def trusted_cert(self) -> Path:
        """Under TLS, what a client must trust: the served certificate, or its CA."""
        return Path(self.flags.get("ca-for-tests") or self.data_dir / "tls" / "cert.pem")

    @property
    def verify(self) -> ssl.SSLContext:
        if not self.tls:
            return default_tls()
        cert = self.trusted_cert
        return trusting(cert, cert.stat().st_mtime_ns)

    def start(self) -> None:
        cmd = [
            self.executable,
            "server",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.database_url:
            cmd += ["--database-url", self.database_url]
        for name, value in self.flags.items():
            if name == "ca-for-tests":
                continue
            cmd += [f"--{name}"] if value is True else [f"--{name}", str(value)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        database = self.data_dir / "gpufleet.db"
        if not (self.database_url or self.migrate_at_start or database.exists()):
            shutil.copyfile(migrated_sqlite(), database)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        try:
            wait_until(
                self._ready, timeout=30, message=f"server on {self.url} (log: {self.log_path})"
            )
        except BaseException:
            self.kill()  # never leave a half-started server behind
            raise

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited early:\n{self.log_path.read_text()[-3000:]}")
        if self.tls and not self.trusted_cert.is_file():
            return False  # the server makes its certificate as it starts
        try:
            # /readyz: the database answers and its schema is current. Not /openapi.json,
            # whose first request builds the whole schema (half a second of CPU per start).
            return httpx.get(f"{self.url}/readyz", timeout=1, verify=self.verify).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)
        self.proc = None

    @property
    def admin_key(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=10,
            verify=self.verify,
            headers={"Authorization": f"Bearer {self.admin_key}"},
        )


def serving(
    data_dir: Path, database_url: str | None = None, *, host: str = "127.0.0.1", **flags: Any
) -> Iterator[ServerProcess]:
    """A started orchestrator for a module's fixture (`yield from serving(...)`), listening on
    `host`, stopped with SIGTERM when the module is done."""
    proc = ServerProcess(data_dir, database_url, host=host, **flags)
    proc.start()
    yield proc
    proc.kill(signal.SIGTERM)


class EventReader:
    """Reads a worker's SSE stream on a thread; `data:` payloads land in a queue."""

    def __init__(self, url: str, token: str, worker_id: str) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.arrivals: list[tuple[float, str]] = []  # (time.monotonic(), type) of each event
        self.closed = threading.Event()
        self.status_code: int | None = None
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None), verify=default_tls())
        self._thread = threading.Thread(target=self._run, args=(url, token, worker_id), daemon=True)
        self._thread.start()

    def _run(self, url: str, token: str, worker_id: str) -> None:
        try:
            with self._client.stream(
                "GET",
                f"{url}/api/workers/stream",
                params={"worker_id": worker_id},
                headers={"X-Worker-Token": token},
            ) as resp:
                self.status_code = resp.status_code
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        self.arrivals.append((time.monotonic(), event.get("type", "")))
                        self.events.put(event)
        except httpx.HTTPError:
            pass
        finally:
            self.closed.set()

    def next(self, type_: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {type_!r} event within {timeout} s")
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event.get("type") == type_:
                return event

    def close(self) -> None:
        self._client.close()


class FakeWorker:
    """Speaks the worker protocol by hand, so tests control every message."""

    def __init__(
        self,
        server: ServerProcess,
        name: str,
        labels: dict[str, str] | None = None,
        worker_type: str = "persistent",
    ) -> None:
        with server.admin() as admin:
            resp = admin.post(
                "/api/admin/workers",
                json={"name": name, "worker_type": worker_type, "labels": labels or {}},
            )
            assert resp.status_code == 201, resp.text
        body = resp.json()
        self.server = server
        self.id: str = body["worker_id"]
        self.token: str = body["token"]
        self.stream: EventReader | None = None
        self._alive = threading.Event()

    def keep_alive(self, every: float = 0.3) -> None:
        """Heartbeat on a thread until close(), as a live agent would."""
        self._alive.set()

        def beat() -> None:
            with self.http() as c:
                while self._alive.is_set():
                    with contextlib.suppress(httpx.HTTPError):
                        c.post("/api/workers/heartbeat", json={"worker_id": self.id})
                    time.sleep(every)

        threading.Thread(target=beat, daemon=True).start()

    def http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url,
            timeout=10,
            headers={"X-Worker-Token": self.token},
            verify=self.server.verify,
        )

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        with self.http() as c:
            return c.post(path, json=body)

    def register(self, **body: Any) -> dict[str, Any]:
        payload = {
            "name": "x",
            "gpu_count": 1,
            "gpu_name": "Fake GPU",
            "gpu_vram_gb": 24,
            "accelerator_type": "cuda",
            "features": ["command", "attempts"],  # gpufleet's dialect unless told
            **body,
        }
        resp = self.post("/api/workers/register", payload)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def connect(self) -> EventReader:
        self.stream = EventReader(self.server.url, self.token, self.id)
        self.stream.next("connected")
        return self.stream

    def report(self, job_id: str, status: str, **extra: Any) -> httpx.Response:
        return self.post(f"/api/workers/job/{job_id}/status", {"status": status, **extra})

    def close(self) -> None:
        self._alive.clear()
        if self.stream:
            self.stream.close()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None (SQLite in the data folder) or a fresh PostgreSQL database, dropped afterwards."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str | None
) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("orchestrator"), database_url)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


os.environ.setdefault("NO_COLOR", "1")


# -- real `gpufleet worker` processes (tests/e2e/test_worker_*.py) ----------------------------

PYTHON = sys.executable
# A stand-in for SimpleTuner's trainer (`python -m simpletuner.train`): put it on PYTHONPATH.
SIMPLETUNER_STUB = Path(__file__).parent / "simpletuner_stub"


class WorkerProcess:
    """A `gpufleet worker` subprocess with its own worker record, token and work folder."""

    def __init__(
        self,
        server: ServerProcess,
        work_root: Path,
        *,
        persistent: bool = False,
        labels: dict[str, str] | None = None,
        cancel_grace: float = 1.0,
        orchestrator_url: str | None = None,
        extra_args: tuple[str, ...] = (),
        executable: str = GPUFLEET,
        env: dict[str, str] | None = None,
        launch: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    ) -> None:
        self.server = server
        self.extra_args = extra_args
        self.executable = executable
        self.env = env
        # How its process starts: Popen here, or another machine's (tests/netns.py's
        # Namespace.start).
        self.launch = launch
        # What the worker is given: the server's URL unless a test says otherwise (a relay,
        # a comma-separated list of URLs).
        self.orchestrator_url = orchestrator_url or server.url
        self.name = unique("agent")
        self.labels = labels or {}
        self.persistent = persistent
        self.cancel_grace = cancel_grace
        self.work_dir = work_root / self.name
        self.log_path = work_root / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        with server.admin() as admin:
            resp = admin.post(
                "/api/admin/workers",
                json={
                    "name": self.name,
                    "labels": self.labels,
                    "worker_type": "persistent" if persistent else "ephemeral",
                },
            )
        assert resp.status_code == 201, resp.text
        self.id: str = resp.json()["worker_id"]
        self.token: str = resp.json()["token"]

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.proc = self.launch(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        # Connected once is enough: an ephemeral worker may take a waiting job, end it and
        # leave before a poll sees it idle or busy.
        wait_until(
            lambda: (
                (rec := self.record())["status"] in ("idle", "busy")
                or rec["connected_at"] is not None
            ),
            timeout=20,
            message=f"worker {self.name} to connect (log: {self.log_path})",
        )
        return self

    def command(self) -> list[str]:
        cmd = [
            self.executable,
            "worker",
            "-v",
            "--orchestrator-url",
            self.orchestrator_url,
            "--worker-token",
            self.token,
            "--name",
            self.name,
            "--work-dir",
            str(self.work_dir),
            "--heartbeat-interval",
            "0.5",
            "--cancel-grace",
            str(self.cancel_grace),
        ]
        if self.persistent:
            cmd.append("--persistent")
        cmd += self.extra_args
        if self.server.tls:
            cmd += ["--ca-cert", str(self.server.trusted_cert)]
        return cmd

    def record(self) -> dict[str, Any]:
        with self.server.admin() as admin:
            return dict(admin.get(f"/api/admin/workers/{self.id}").json())

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float = 20) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.name} still runs; log:\n{self.log()}") from None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Makes `WorkerProcess`es (not started); kills whatever is left at the end of the test."""
    made: list[WorkerProcess] = []

    def make(server: ServerProcess, **kw: Any) -> WorkerProcess:
        made.append(WorkerProcess(server, tmp_path, **kw))
        return made[-1]

    yield make
    for agent in made:
        agent.stop()


def submit_job(
    server: ServerProcess, labels: dict[str, str], command: list[str] | None, **body: Any
) -> str:
    """Submit an inline config running `command` on workers with `labels` (None: a SimpleTuner
    config, which names no command); the job's id."""
    config = {**({} if command is None else {"command": command}), **body.pop("config", {})}
    payload = {"config": config, "target": "worker", "worker_labels": labels, **body}
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=payload)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


class Member:
    """A user of one team, with a key of their own."""

    def __init__(self, server: ServerProcess, team: str, level: str, **team_fields: Any) -> None:
        self.server = server
        self.team = unique(team)
        self.name = unique(f"{team}-user")
        with server.admin() as admin:
            created = admin.post("/api/teams", json={"name": self.team, **team_fields})
            assert created.status_code == 201, created.text
            created = admin.post(
                "/api/users", json={"name": self.name, "level": level, "team": self.team}
            )
            assert created.status_code == 201, created.text
            key = admin.post(
                "/api/admin/api-keys",
                json={
                    "name": self.name,
                    "permissions": ["queue.read", "queue.submit"],
                    "user": self.name,
                },
            )
            assert key.status_code == 201, key.text
        self.key = str(key.json()["key"])

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url,
            timeout=10,
            verify=self.server.verify,  # not a CA bundle loaded again for each submit
            headers={"Authorization": f"Bearer {self.key}"},
        )

    def submit(
        self, labels: dict[str, str], command: list[str] | None, **body: Any
    ) -> dict[str, Any]:
        """A job for a worker with `labels` and one GPU (unless `body` says otherwise): the
        command, or with None the config alone (`body`'s `config`: a SimpleTuner agent's)."""
        config = {**({"command": command} if command else {}), **body.pop("config", {})}
        with self.client() as c:
            resp = c.post(
                "/api/queue/submit",
                json={
                    "config": config,
                    "target": "worker",
                    "worker_labels": labels,
                    "gpu_count": 1,
                    **body,
                },
            )
        assert resp.status_code == 201, resp.text
        job = dict(resp.json())
        assert job["team"] == self.team and job["user"] == self.name, job
        return job


def job_state(server: ServerProcess, job_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        return dict(admin.get(f"/api/queue/{job_id}").json())


def job_log_lines(server: ServerProcess, job_id: str) -> list[str]:
    with server.admin() as admin:
        body = admin.get(f"/api/queue/{job_id}/logs").json()
    return [line["text"] for line in body["lines"]]


def wait_job(
    server: ServerProcess, job_id: str, *statuses: str, timeout: float = 30
) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (job := job_state(server, job_id))["status"] in statuses and job,
            timeout=timeout,
            message=f"job {job_id} to be {'/'.join(statuses)}",
        )
    )


def create_pool(server: ServerProcess, prefix: str, provider: dict[str, Any], **fields: Any) -> str:
    """A new pool of `provider` whose workers are labelled `pool=<its name>` (jobs ask for
    it), with no GPUs and a max of 2 unless `fields` say otherwise; its name."""
    name = unique(prefix)
    body = {
        "name": name,
        "provider": provider,
        "labels": {"pool": name},
        "gpu_count": 0,
        "max_workers": 2,
        "launch_timeout_s": 60,
        **fields,
    }
    with server.admin() as admin:
        resp = admin.post("/api/admin/pools", json=body)
    assert resp.status_code == 201, resp.text
    return name


def pool_launches(server: ServerProcess, pool: str) -> list[dict[str, Any]]:
    """A pool's launches, the newest first."""
    with server.admin() as admin:
        resp = admin.get(f"/api/admin/pools/{pool}")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["launches"])


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] not in "ZX"
    except FileNotFoundError:
        return False


# -- replicas on one PostgreSQL database (tests/e2e/test_replicas.py, test_deploy.py) ---------

SHARED_FILES = ("admin.token", "audit.key", "ui-secret")  # docs/deploy.md: copy to each replica


def start_replicas(
    root: Path,
    database_url: str,
    count: int,
    *,
    env: dict[str, str] | Callable[[int], dict[str, str]] | None = None,
    **flags: Any,
) -> list[ServerProcess]:
    """The first replica creates the keys; the others get copies, then start. `env`: every
    replica's environment, or a function giving replica n's (None: ours)."""

    def env_of(n: int) -> dict[str, str] | None:
        return env(n) if callable(env) else env

    replicas = [
        ServerProcess(root / f"replica-{n}", database_url, env=env_of(n), **flags)
        for n in range(count)
    ]
    replicas[0].start()
    for replica in replicas[1:]:
        replica.data_dir.mkdir(parents=True)
        for name in SHARED_FILES:
            shutil.copy2(replicas[0].data_dir / name, replica.data_dir / name)
        replica.start()
    return replicas


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Path]:
    """A `command` pool's scripts' folder, where they keep a pid file a machine (a process):
    afterwards a launch script held on the file `gate` is let go, and the machines stopped."""
    folder = tmp_path / "machines"
    folder.mkdir()
    yield folder
    (folder / "gate").touch()
    for pidfile in folder.glob("*.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.fixture
def local_machines(machines: Path) -> Iterator[Path]:
    """`machines` for a `local` pool's workers (tests/e2e/local_workers.py): afterwards every
    one started is stopped, with its jobs, whichever orchestrator started it."""
    yield machines
    stop_all(machines)
