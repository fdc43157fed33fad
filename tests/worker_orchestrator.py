"""The real orchestrator for the worker's own artifact tests: the `Fleet`'s app
(tests/api/conftest.py) served by uvicorn on a real socket, a scripted worker of its own lane
holding a real attempt of a real job (offer taken, `running` reported), and the worker's real
`OrchestratorClient` pointed at that socket with that worker's token.

`Wire` is the client's network: the real one, with every request and the status it got
recorded, and faults (a 503, a refused connection, a lost answer, a tampered answer) injected in
front of the real server when a test asks for one. Nothing else stands in for the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from bench.s3 import environment, new_bucket, s3_environment

from gpufleet.artifacts.keys import artifact_key
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.settings import AgentSettings
from tests.api.conftest import Agent, Fleet
from tests.api.served import free_socket, serve

# A fault sees a request before the real server does: it answers instead (a response), raises
# (a transport error), or lets it through (None).
Fault = Callable[[httpx.Request], httpx.Response | None]
# A tamper rewrites the real server's JSON answer to a request it matches (None: leave it).
Tamper = Callable[[httpx.Request, Any], Any]


@dataclass
class Sent:
    method: str
    url: str
    token: str | None
    headers: httpx.Headers
    body: Any  # the JSON body, or None for raw bytes
    status: int | None = None  # None: no answer reached the worker


@dataclass
class Wire(httpx.AsyncBaseTransport):
    """The real network, seen; `faults`, `tamper`, `lose` and `slow` inject failures (`lose`:
    the server answers a request it matches, the worker never hears it; `slow`: the answer
    reaches the worker that many seconds late)."""

    faults: list[Fault] = field(default_factory=list)
    tamper: Tamper | None = None
    lose: Callable[[httpx.Request], bool] | None = None
    slow: Callable[[httpx.Request], float] | None = None
    sent: list[Sent] = field(default_factory=list)
    _real: httpx.AsyncHTTPTransport = field(default_factory=httpx.AsyncHTTPTransport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = None
        if request.headers.get("content-type") == "application/json":
            body = json.loads(await request.aread())
        seen = Sent(
            request.method,
            str(request.url),
            request.headers.get("x-worker-token"),
            request.headers,
            body,
        )
        self.sent.append(seen)
        for fault in self.faults:
            answer = fault(request)
            if answer is not None:
                seen.status = answer.status_code
                return answer
        response = await self._real.handle_async_request(request)
        if self.lose is not None and self.lose(request):
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        if self.slow is not None and (late := self.slow(request)) > 0:
            await response.aread()
            await asyncio.sleep(late)
        seen.status = response.status_code
        if self.tamper is not None and "json" in response.headers.get("content-type", ""):
            raw = await response.aread()
            changed = self.tamper(request, json.loads(raw))
            if changed is not None:
                return httpx.Response(response.status_code, json=changed)
            return httpx.Response(response.status_code, headers=response.headers, content=raw)
        return response

    async def aclose(self) -> None:
        await self._real.aclose()

    def puts(self) -> list[Sent]:
        return [s for s in self.sent if s.method == "PUT"]

    def announces(self) -> list[Sent]:
        return [s for s in self.sent if s.method == "POST" and s.url.endswith("/upload")]


def fail(method: str, times: int, answer: Callable[[httpx.Request], httpx.Response]) -> Fault:
    """The first `times` requests of `method` get `answer` (which may raise) instead."""
    left = [times]

    def fault(request: httpx.Request) -> httpx.Response | None:
        if request.method != method or left[0] <= 0:
            return None
        left[0] -= 1
        return answer(request)

    return fault


def busy(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"detail": "busy"}, request=request)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("All connection attempts failed", request=request) from (
        ConnectionRefusedError(111, "Connection refused")
    )


@contextlib.asynccontextmanager
async def served_fleet(root: Path, **settings: Any) -> AsyncIterator[Fleet]:
    """An orchestrator on SQLite in `root`, on a real socket; `settings` as ServerSettings."""
    sock = free_socket()
    fleet = Fleet(root, f"sqlite+aiosqlite:///{root / 'gpufleet.db'}")
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    fleet.settings = fleet.settings.model_copy(update={"public_url": url, **settings})
    await fleet.start()
    try:
        async with serve(fleet.app, sock):
            yield fleet
    finally:
        await fleet.stop()


@contextlib.asynccontextmanager
async def served_s3_fleet(root: Path, endpoint: str, **settings: Any) -> AsyncIterator[Fleet]:
    """As `served_fleet`, its artifacts in a new bucket of the moto S3 server at `endpoint`
    (`via: store`)."""
    with environment(s3_environment(endpoint)):
        url = f"s3://{new_bucket(endpoint, 'fleet')}/gpufleet"
        async with served_fleet(root, artifacts=url, **settings) as fleet:
            yield fleet


def module_fleets(**settings: Any) -> tuple[Any, ...]:
    """Fixtures for a test module, to assign to these names: `orchestrator` (one per module,
    on the data folder: `via: orchestrator`), `s3_orchestrator` (a bucket of the test
    process's moto server, tests/conftest.py `s3_endpoint`: `via: store`),
    `via` (both, in turn) and `fleet` (the one `via` names)."""

    @pytest_asyncio.fixture(scope="module", loop_scope="module", name="orchestrator")
    async def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
        async with served_fleet(tmp_path_factory.mktemp("orchestrator"), **settings) as fleet:
            yield fleet

    @pytest_asyncio.fixture(scope="module", loop_scope="module", name="s3_orchestrator")
    async def s3_orchestrator(
        tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str
    ) -> AsyncIterator[Fleet]:
        root = tmp_path_factory.mktemp("s3-orchestrator")
        async with served_s3_fleet(root, s3_endpoint, **settings) as fleet:
            yield fleet

    @pytest.fixture(params=["orchestrator", "store"], name="via")
    def via(request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture(name="fleet")
    def fleet(request: pytest.FixtureRequest, via: str) -> Fleet:
        found: Fleet = request.getfixturevalue(
            "orchestrator" if via == "orchestrator" else "s3_orchestrator"
        )
        return found

    return orchestrator, s3_orchestrator, via, fleet


def url_of(fleet: Fleet) -> str:
    url = fleet.settings.public_url
    assert url is not None
    return url


@dataclass
class Held:
    """A job's live attempt, held by a scripted worker of its own lane."""

    fleet: Fleet
    agent: Agent
    offer: dict[str, Any]

    @property
    def job_id(self) -> str:
        return str(self.offer["job_id"])

    @property
    def attempt_id(self) -> str:
        return str(self.offer["attempt_id"])

    def client(self, wire: Wire) -> OrchestratorClient:
        """The worker's real client, as this worker, over `wire`."""
        settings = AgentSettings(orchestrator_url=url_of(self.fleet), worker_token=self.agent.token)
        return OrchestratorClient(settings, transport=wire)

    async def preempt(self) -> dict[str, Any]:
        """The attempt is preempted; the job comes back to this worker as the next attempt,
        taken and running; the new offer (its `resume` names the latest checkpoint)."""
        answer = await self.agent.report(
            self.job_id, "preempted", attempt_id=self.attempt_id, error="spot notice"
        )
        assert answer.status_code == 200, answer.text
        self.offer = await self.agent.next_offer()
        await self.agent.run(self.offer)
        return self.offer

    async def listing(self) -> dict[str, Any]:
        """`GET /api/queue/{id}/artifacts`: what the orchestrator stored for the job."""
        answer = await self.fleet.admin.get(f"/api/queue/{self.job_id}/artifacts")
        assert answer.status_code == 200, answer.text
        listing: dict[str, Any] = answer.json()
        return listing

    async def stored(self) -> dict[tuple[str, str], bytes]:
        """Every artifact of the job, (attempt id, path) → its bytes read back."""
        out = {}
        for art in (await self.listing())["artifacts"]:
            got = await self.fleet.admin.get(
                f"/api/queue/{self.job_id}/artifacts/{art['path']}",
                params={"attempt_id": art["attempt_id"]},
            )
            if got.status_code == 307:  # object storage: a presigned URL of the bucket
                async with httpx.AsyncClient() as bucket:
                    got = await bucket.get(got.headers["location"])
            assert got.status_code == 200, got.text
            out[(art["attempt_id"], art["path"])] = got.content
        return out

    def blob(self, attempt_id: str, path: str) -> Path:
        """Where the data-folder store keeps that file."""
        found = (
            self.fleet.settings.data_dir / "artifacts" / artifact_key(self.job_id, attempt_id, path)
        )
        assert found.is_file(), f"{found} is not where the store keeps {path}"
        return found


async def held_attempt(fleet: Fleet, **submit: Any) -> Held:
    """A new job taken by a new worker of its own lane (no other worker takes it)."""
    lane = {"lane": secrets.token_hex(4)}
    agent = await fleet.create_worker(f"w-{lane['lane']}", labels=lane, worker_type="persistent")
    await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)
    submit.setdefault("config", {"command": ["python", "train.py"]})
    await fleet.submit(worker_labels=lane, max_retries=3, retry_on=["failed", "lost"], **submit)
    offer = await agent.next_offer()
    await agent.run(offer)
    return Held(fleet, agent, offer)
