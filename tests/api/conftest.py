"""The orchestrator's ASGI app in process, on a real database, driven like its clients are.

`fleet` starts the app (lifespan included) on the parametrised `database_url`, with a fake
clock and with the background sweeps stopped: a test moves time on and runs a sweep itself,
so nothing sleeps and nothing races. Workers are scripted `Agent`s that speak the wire
protocol of docs/protocol.md; their event streams are read through `EventStream`, a small
ASGI client that hands over each chunk as the app sends it (httpx's ASGITransport waits for
the whole body, which an endless SSE stream never finishes).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from gpufleet.server import streams
from gpufleet.server.app import create_app
from gpufleet.server.context import Context
from gpufleet.server.routes import events
from gpufleet.server.services import health
from gpufleet.server.settings import ServerSettings
from gpufleet.supervisor import Supervisor
from tests.nasty import dumps
from tests.waiting import wait_until_async

HEARTBEAT_TIMEOUT = 120.0
ACK_TIMEOUT = 30.0
CLIENT = ("127.0.0.1", 40000)
EVENT_TIMEOUT = 5.0
# What `gpufleet worker` says it does, less `attempt_token` (sending each attempt's token:
# tests/api/test_attempt_binding.py), so these scripted workers send the worker token alone.
GPUFLEET_FEATURES = ["command", "attempts"]

# The API tier runs on SQLite. A test the database decides (locks and races, NOTIFY across
# streams, SKIP LOCKED, what a column can store, migrations, statement budgets) is marked
# `both_databases` and runs on PostgreSQL too; everything else (HTTP rules, permissions,
# validation, what an answer says) cannot differ between them and runs once.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
both_databases = pytest.mark.both_databases


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of this tier asking for `database_url` gets SQLite alone unless it is marked
    `both_databases` or names its databases itself (a parametrize of `database_url`)."""
    if "database_url" not in metafunc.fixturenames:
        return
    definition = metafunc.definition
    if definition.get_closest_marker("both_databases") is not None:
        return
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "database_url" in (names.split(",") if isinstance(names, str) else names):
            return
    definition.add_marker(sqlite_only)


# Every list an operator or the web UI reads (`Fleet.every_read_answers` adds each item).
READS = [
    "/api/queue",
    "/api/queue?status=queued",
    "/api/queue?status=running",
    "/api/queue?status=failed",
    "/api/queue?worker=local&label=team%3Dnlp&config_name=cfg&target=auto&id_prefix=j_",
    "/api/admin/workers",
    "/api/admin/orchestrator",
    "/api/configs",
    "/api/audit?limit=500",
    "/api/audit/verify",
    "/api/admin/api-keys",
    "/api/admin/webhooks",
    "/api/admin/pools",
    "/api/capacity",
    "/api/sweeps",
]


async def post_raw(
    client: httpx.AsyncClient, path: str, body: Any, *, method: str = "POST", **headers: str
) -> httpx.Response:
    """A JSON body as a careless client writes it (`tests.nasty.dumps`): surrogates escaped,
    NaN as a literal, which `json=` cannot send."""
    return await client.request(
        method, path, content=dumps(body), headers={"Content-Type": "application/json", **headers}
    )


async def waits_on_a_lock(url: str, message: str) -> None:
    """Until another session of the PostgreSQL database at `url` waits on a lock."""
    u = make_url(url)
    conn = await asyncpg.connect(host=u.host, port=u.port, user=u.username, database=u.database)
    try:
        await wait_until_async(
            lambda: conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ),
            timeout=10,
            message=message,
        )
    finally:
        await conn.close()


class FakeClock:
    """An aware UTC clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class EventStream:
    """One open `GET /api/workers/stream`, read frame by frame as the app writes it."""

    def __init__(self, app: FastAPI, path: str, query: str, headers: dict[str, str]) -> None:
        self._scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": [(b"host", b"test")]
            + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": CLIENT,
            "server": ("test", 80),
        }
        self._app = app
        self._messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._buffer = b""
        self._requested = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.ended = False
        self.frames: list[str] = []  # raw frames, `event:` lines included

    async def _receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        await self._messages.put(message)

    async def open(self) -> EventStream:
        self._task = asyncio.create_task(self._app(self._scope, self._receive, self._send))
        start = await asyncio.wait_for(self._messages.get(), EVENT_TIMEOUT)
        assert start["type"] == "http.response.start"
        self.status = start["status"]
        self.headers = {k.decode(): v.decode() for k, v in start.get("headers", [])}
        return self

    async def body(self) -> bytes:
        """The whole body of a response that ends by itself (an error answer)."""
        while not self.ended:
            await self._read_chunk(EVENT_TIMEOUT)
        return self._buffer

    async def _read_chunk(self, within: float) -> None:
        message = await asyncio.wait_for(self._messages.get(), within)
        self._buffer += message.get("body", b"")
        if not message.get("more_body", False):
            self.ended = True

    async def next(self, within: float = EVENT_TIMEOUT) -> dict[str, Any] | None:
        """The next `data:` payload, pings included; None once the server ended the stream."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while b"\n\n" not in self._buffer:
            if self.ended:
                return None
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no event within {within} s; got {self.frames}")
            await self._read_chunk(remaining)
        raw, self._buffer = self._buffer.split(b"\n\n", 1)
        frame = raw.decode()
        self.frames.append(frame)
        # Lines end at "\n" alone (the server writes no "\r"): not `splitlines`, which also
        # breaks at U+2028, U+0085 and the like, which JSON leaves unescaped in a value.
        lines = frame.split("\n")
        data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
        assert len(data) == 1, f"one data line per frame, got {frame!r}"
        payload: dict[str, Any] = orjson.loads(data[0])
        return payload

    async def expect(self, *types: str, within: float = EVENT_TIMEOUT) -> dict[str, Any]:
        """The next event of one of these types, skipping pings, the greeting and the audit
        log's nudges (every audited write sends one to a key that may read the log)."""
        while True:
            event = await self.next(within)
            if event is None:
                raise AssertionError(f"the stream ended while waiting for {types}")
            if event["type"] in types:
                return event
            if event["type"] not in ("ping", "connected", "audit"):
                raise AssertionError(f"wanted {types}, got {event}")

    async def collect(self, seconds: float = 0.1) -> list[dict[str, Any]]:
        """Every event that arrives within a short while (pings left out)."""
        out = []
        with contextlib.suppress(TimeoutError):
            while (event := await self.next(seconds)) is not None:
                if event["type"] not in ("ping", "connected"):
                    out.append(event)
        return out

    async def wait_closed(self, within: float = EVENT_TIMEOUT) -> bool:
        """Whether the server ends the stream by itself within that many seconds."""
        with contextlib.suppress(TimeoutError):
            while await self.next(within) is not None:
                pass
        return self.ended

    async def close(self) -> None:
        self._gone.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, EVENT_TIMEOUT)


class Agent:
    """A scripted worker: one token, the calls of the wire protocol, nothing clever."""

    def __init__(self, fleet: Fleet, worker_id: str, token: str, name: str) -> None:
        self.fleet = fleet
        self.id = worker_id
        self.token = token
        self.name = name
        self.stream: EventStream | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Worker-Token": self.token}

    async def register(self, **body: Any) -> httpx.Response:
        body.setdefault("name", self.name)
        body.setdefault("features", GPUFLEET_FEATURES)  # gpufleet's dialect unless told
        return await self.fleet.http.post("/api/workers/register", json=body, headers=self.headers)

    async def open_stream(self, worker_id: str | None = None) -> EventStream:
        stream = await self.fleet.open_stream(self.token, worker_id or self.id)
        if stream.status == 200:
            assert (await stream.expect("connected"))["worker_id"] == self.id
            self.stream = stream
        return stream

    async def connect(self, **registration: Any) -> Agent:
        """Register (GPU facts as keyword arguments) and open the event stream."""
        answer = await self.register(**registration)
        assert answer.status_code == 200, answer.text
        await self.open_stream()
        return self

    async def next_offer(self) -> dict[str, Any]:
        assert self.stream is not None, "open the stream first"
        return await self.stream.expect("job_submit")

    async def heartbeat(self, **body: Any) -> httpx.Response:
        body.setdefault("worker_id", self.id)
        return await self.fleet.http.post("/api/workers/heartbeat", json=body, headers=self.headers)

    async def report(self, job_id: str, status: str, **body: Any) -> httpx.Response:
        return await self.fleet.http.post(
            f"/api/workers/job/{job_id}/status",
            json={"status": status, **body},
            headers=self.headers,
        )

    async def run(self, offer: dict[str, Any], *, dialect: str = "gpufleet") -> None:
        """Acknowledge an offer and start it, as each dialect does."""
        if dialect == "gpufleet":
            steps = [("acknowledged", {"attempt_id": offer["attempt_id"]})]
            steps.append(("running", {"attempt_id": offer["attempt_id"]}))
        else:
            steps = [("starting", {}), ("training", {})]
        for status, extra in steps:
            answer = await self.report(offer["job_id"], status, **extra)
            assert answer.status_code == 200, answer.text

    async def finish(self, offer: dict[str, Any], status: str = "completed", **body: Any) -> Any:
        answer = await self.report(offer["job_id"], status, attempt_id=offer["attempt_id"], **body)
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def logs(self, job_id: str, lines: list[dict[str, str]], **body: Any) -> httpx.Response:
        return await self.fleet.http.post(
            f"/api/workers/job/{job_id}/logs", json={"lines": lines, **body}, headers=self.headers
        )

    async def queue_check(self, worker_id: str | None = None) -> httpx.Response:
        return await self.fleet.http.get(
            "/api/workers/queue", params={"worker_id": worker_id or self.id}, headers=self.headers
        )

    async def disconnect(self) -> httpx.Response:
        answer = await self.fleet.http.post(
            "/api/workers/disconnect", json={"worker_id": self.id}, headers=self.headers
        )
        if self.stream is not None:
            await self.stream.wait_closed()
        return answer

    async def info(self) -> dict[str, Any]:
        answer = await self.fleet.admin.get(f"/api/admin/workers/{self.id}")
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        return data


class Fleet:
    """The running orchestrator, an admin client, and helpers that read like the docs."""

    def __init__(self, tmp_path: Path, database_url: str) -> None:
        self.settings = ServerSettings(
            data_dir=tmp_path / "data",
            database_url=database_url,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            health_interval=3600,
            ack_timeout=ACK_TIMEOUT,
            print_admin_key=False,
            webhook_allow_hosts=("127.0.0.1",),  # tests/webhook_receiver.py listens there
        )
        self.clock = FakeClock()
        self.secrets: set[str] = set()  # every token and key handed out, for the leak scan
        self._stack = contextlib.AsyncExitStack()
        self._streams: list[EventStream] = []
        self.app: FastAPI
        self.http: httpx.AsyncClient
        self.admin: httpx.AsyncClient

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> Fleet:
        async def quiet(_ctx: Context, supervisor: Supervisor) -> None:
            await supervisor.close()  # tests run the sweeps themselves, on the fake clock

        self.app = create_app(self.settings, on_start=quiet)
        # asgi-lifespan's 5 s: a PostgreSQL fleet's start once missed it three tests in a
        # row on a loaded machine (1 s idle).
        await self._stack.enter_async_context(LifespanManager(self.app, startup_timeout=30))
        self.ctx.clock = self.clock
        self.ctx.started_at = self.clock.now - timedelta(days=1)
        self.admin_key = (self.settings.data_dir / "admin.token").read_text().strip()
        self.secrets.add(self.admin_key)
        self.http = await self._stack.enter_async_context(self.client())
        self.admin = await self._stack.enter_async_context(
            self.client(headers={"Authorization": f"Bearer {self.admin_key}"})
        )
        return self

    async def stop(self) -> None:
        for stream in self._streams:
            await stream.close()
        self._streams.clear()
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()

    async def restart(self) -> None:
        """Stop the orchestrator and start a new one on the same database and data folder."""
        await self.stop()
        await self.start()

    @property
    def ctx(self) -> Context:
        ctx: Context = self.app.state.ctx
        return ctx

    def client(
        self, *, headers: dict[str, str] | None = None, client: tuple[str, int] = CLIENT
    ) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, client=client)
        return httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers)

    async def open_stream(self, token: str, worker_id: str) -> EventStream:
        return await self.open_sse(
            "/api/workers/stream", f"worker_id={worker_id}", {"X-Worker-Token": token}
        )

    async def open_sse(self, path: str, query: str, headers: dict[str, str]) -> EventStream:
        """Any event stream of the app, closed when the test ends."""
        stream = EventStream(self.app, path, query, headers)
        self._streams.append(stream)
        return await stream.open()

    # ---- admin --------------------------------------------------------------------------

    async def create_worker(
        self, name: str, *, labels: dict[str, str] | None = None, worker_type: str | None = None
    ) -> Agent:
        body: dict[str, Any] = {"name": name, "labels": labels or {}}
        if worker_type is not None:
            body["worker_type"] = worker_type
        answer = await self.admin.post("/api/admin/workers", json=body)
        assert answer.status_code == 201, answer.text
        created = answer.json()
        self.secrets.add(created["token"])
        return Agent(self, created["worker_id"], created["token"], name)

    async def online_worker(
        self,
        name: str,
        *,
        gpu_count: int = 1,
        labels: dict[str, str] | None = None,
        worker_type: str = "persistent",
    ) -> Agent:
        """A worker created by an admin, registered with its GPUs, its stream open (idle)."""
        agent = await self.create_worker(name, labels=labels, worker_type=worker_type)
        return await agent.connect(gpu_count=gpu_count, gpu_name="Test GPU", gpu_vram_gb=24)

    async def rotate_token(self, agent: Agent) -> str:
        answer = await self.admin.post(f"/api/admin/workers/{agent.id}/token")
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["token"]
        self.secrets.add(token)
        return token

    async def mint_key(self, *permissions: str, name: str = "scoped") -> dict[str, Any]:
        answer = await self.admin.post(
            "/api/admin/api-keys", json={"name": name, "permissions": list(permissions)}
        )
        assert answer.status_code == 201, answer.text
        key: dict[str, Any] = answer.json()
        self.secrets.add(key["key"])
        return key

    # ---- queue --------------------------------------------------------------------------

    async def submit(self, **body: Any) -> dict[str, Any]:
        body.setdefault("config", {"command": ["python", "train.py"]})
        answer = await self.admin.post("/api/queue/submit", json=body)
        assert answer.status_code == 201, answer.text
        job: dict[str, Any] = answer.json()
        return job

    async def job(self, job_id: str) -> dict[str, Any]:
        answer = await self.admin.get(f"/api/queue/{job_id}")
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        return data

    async def audit(self, **params: Any) -> list[dict[str, Any]]:
        answer = await self.admin.get("/api/audit", params={"limit": 500, **params})
        assert answer.status_code == 200, answer.text
        events: list[dict[str, Any]] = answer.json()["events"]
        return events

    async def every_read_answers(self, *, newest: int = 500, also: tuple[str, ...] = ()) -> None:
        """Every read an operator or the web UI makes answers 200, whatever was written: the
        lists, and each of the `newest` jobs and the jobs `also` names, every worker and
        every stored config."""
        jobs = (await self.admin.get(f"/api/queue?limit={newest}")).json()["jobs"] if newest else []
        jobs += [{"id": job_id} for job_id in also if job_id not in {j["id"] for j in jobs}]
        workers = (await self.admin.get("/api/admin/workers")).json()["workers"]
        configs = (await self.admin.get("/api/configs")).json()["configs"]
        pools = (await self.admin.get("/api/admin/pools")).json()["pools"]
        paths = [*READS]
        paths += [f"/api/queue/{j['id']}" for j in jobs]
        paths += [f"/api/queue/{j['id']}/logs" for j in jobs]
        paths += [f"/api/queue/{j['id']}/progress" for j in jobs]
        paths += [f"/api/queue/{j['id']}/logs?tail=100" for j in jobs]
        paths += [f"/api/queue/{j['id']}/logs/download" for j in jobs]
        paths += [f"/api/admin/workers/{w['id']}" for w in workers]
        paths += [f"/api/configs/{c['name']}" for c in configs]
        paths += [f"/api/configs/{c['name']}/versions" for c in configs]
        paths += [f"/api/admin/pools/{p['name']}" for p in pools]
        for path in paths:
            answer = await self.admin.get(path)
            assert answer.status_code == 200, (path, answer.text[:300])

    # ---- time ---------------------------------------------------------------------------

    async def heartbeat_sweep(self) -> list[str]:
        """Run the health loop's heartbeat check once, now."""
        return await health.mark_silent_workers_offline(self.ctx)

    async def ack_sweep(self) -> int:
        """Run the ack-timeout loop once, now."""
        return await health.withdraw_unacknowledged_offers(self.ctx)

    # ---- the database, read directly ----------------------------------------------------

    async def all_stored_text(self) -> str:
        """Every row of every table, as text."""
        reflected = sa.MetaData()
        parts = []
        async with self.ctx.store.engine.connect() as conn:
            await conn.run_sync(reflected.reflect)
            for table in reflected.sorted_tables:
                for row in await conn.execute(sa.select(table)):
                    parts.append(f"{table.name}: {tuple(row)!r}")
        return "\n".join(parts)


@contextlib.asynccontextmanager
async def fleet_with(tmp_path: Path, database_url: str, **settings: Any) -> AsyncIterator[Fleet]:
    """A fleet started with other settings (single sign-on's, tests/oidc_provider.py)."""
    configured = Fleet(tmp_path, database_url)
    configured.settings = configured.settings.model_copy(update=settings)
    await configured.start()
    try:
        yield configured
    finally:
        await configured.stop()


@pytest.fixture(autouse=True)
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits the tests would sit through, shortened (e2e and browser servers keep them):
    `/api/events` coalesces a burst over 0.1 s, not 0.5 (a change is one commit, one wake);
    an agent naming no attempts gets its offer 0.05 s after its last job, not 0.5 (the
    released agent's run, tests/e2e/test_simpletuner_agent.py, needs the half second)."""
    monkeypatch.setattr(events, "COALESCE_SECONDS", 0.1)
    monkeypatch.setattr(streams, "LEGACY_OFFER_HOLD", 0.05)


@pytest.fixture
async def fleet(tmp_path: Path, database_url: str) -> AsyncIterator[Fleet]:
    running = await Fleet(tmp_path, database_url).start()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def replica(fleet: Fleet, tmp_path: Path, database_url: str) -> AsyncIterator[Fleet]:
    """A second orchestrator on the same PostgreSQL database; on SQLite (one process) the
    same one."""
    if fleet.ctx.store.dialect != "postgresql":
        yield fleet
        return
    other = tmp_path / "replica" / "data"
    other.mkdir(parents=True)
    for shared in ("admin.token", "audit.key"):
        shutil.copy2(fleet.settings.data_dir / shared, other / shared)
    second = await Fleet(tmp_path / "replica", database_url).start()
    second.clock = fleet.clock
    second.ctx.clock = fleet.clock
    try:
        yield second
    finally:
        await second.stop()


@contextlib.asynccontextmanager
async def linked(*fleets: Fleet) -> AsyncIterator[None]:
    """The replicas' links to each other up, and what each waits on said (the tests' fleets
    start without their loops): an offer made on one reaches a stream on another."""
    loops = [
        asyncio.create_task(loop)
        for f in fleets
        for loop in (f.ctx.replicas.listen(), f.ctx.replicas.speak())
    ]
    try:
        for f in fleets:
            await f.ctx.replicas.wait_connected()
        yield
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
