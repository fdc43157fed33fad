"""The agent loop against an in-process fake orchestrator (an httpx transport that speaks
docs/protocol.md), for what a real server makes hard to stage: fencing, a vanishing server,
abandoned jobs. Jobs are real subprocesses."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.worker.agent import Agent
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.detect import Capabilities
from gpufleet.worker.settings import AgentSettings
from tests.offers import NOT_EVENTS, nameless_offers, unrunnable_offers
from tests.unit.test_runner import alive
from tests.waiting import wait_until_async

Call = tuple[str, dict[str, Any]]
CPU = Capabilities(accelerator_type="cpu", gpus=(), cpu_cores=2, ram_gb=4.0)


# What a stream is fed: an event, raw `data:` text, None (the server closes it) or an error
# (the link breaks).
Feed = dict[str, Any] | str | None | Exception


class EventStream(httpx.AsyncByteStream):
    def __init__(self, events: asyncio.Queue[Feed]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (event := await self.events.get()) is not None:
            if isinstance(event, Exception):
                raise event
            if isinstance(event, str):
                yield f"data: {event}\n\n".encode()
                continue
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class FakeOrchestrator:
    """Records every call; answers like the protocol says; can fence, go away, come back."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.stream: asyncio.Queue[Feed] | None = None
        self.fenced_statuses: set[str] = set()
        self.refused_statuses: set[str] = set()
        self.register_answer: dict[str, Any] = {}
        self.down = False
        self.dead_hosts: set[str] = set()  # one replica of several gone
        self.held_progress: asyncio.Event | None = None  # progress reports wait for it
        self.before_answer: Callable[[Call], Awaitable[None]] | None = None
        self._changed = asyncio.Event()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down or request.url.host in self.dead_hosts:
            raise httpx.ConnectError("All connection attempts failed", request=request) from (
                ConnectionRefusedError(111, "Connection refused")
            )
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if (
            self.held_progress is not None
            and body.get("status") == "running"
            and "progress" in body
        ):
            # Taken once answered, as a server commits: a send cut before its answer is lost.
            await self.held_progress.wait()
        self.calls.append((path, body))
        self._changed.set()
        if self.before_answer is not None:
            await self.before_answer((path, body))
        if path == "/api/workers/register":
            return httpx.Response(
                200,
                json={
                    "worker_id": "w_1",
                    "name": body["name"],
                    "heartbeat_interval": 30,
                    **self.register_answer,
                },
            )
        if path == "/api/workers/stream":
            self.stream = asyncio.Queue()
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=EventStream(self.stream)
            )
        if path.endswith("/status") and body.get("status") in self.fenced_statuses:
            return httpx.Response(409, json={"detail": "worker w_1 no longer holds the job"})
        if path.endswith("/status") and body.get("status") in self.refused_statuses:
            return httpx.Response(404, json={"detail": "no job j_1"})
        return httpx.Response(200, json={"ok": True})

    def send(self, **event: Any) -> None:
        assert self.stream is not None, "no stream open"
        self.stream.put_nowait(event)

    def send_raw(self, data: str) -> None:
        assert self.stream is not None, "no stream open"
        self.stream.put_nowait(data)

    def go_away(self) -> None:
        self.down = True
        if self.stream is not None:
            self.stream.put_nowait(None)
            self.stream = None

    def kill_host(self, host: str) -> None:
        """The replica at `host` dies: its connections reset, new ones are refused."""
        self.dead_hosts.add(host)
        if self.stream is not None:
            self.stream.put_nowait(httpx.ReadError("[Errno 104] Connection reset by peer"))
            self.stream = None

    async def wait_call(self, match: Callable[[Call], bool], within: float = 10) -> Call:
        async def found() -> Call:
            while True:
                for call in self.calls:
                    if match(call):
                        return call
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(found(), within)

    def statuses(self, job_id: str = "j_1") -> list[str]:
        return [body["status"] for body in self.status_bodies(job_id)]

    def status_bodies(self, job_id: str = "j_1") -> list[dict[str, Any]]:
        return [body for path, body in self.calls if path == f"/api/workers/job/{job_id}/status"]

    def log_lines(self, job_id: str = "j_1") -> list[str]:
        return [
            line["text"]
            for path, body in self.calls
            if path == f"/api/workers/job/{job_id}/logs"
            for line in body["lines"]
        ]


def status(job_id: str, value: str) -> Callable[[Call], bool]:
    return lambda call: (
        call == (f"/api/workers/job/{job_id}/status", call[1]) and (call[1].get("status") == value)
    )


def reported_progress(fake: FakeOrchestrator, job_id: str = "j_1") -> list[dict[str, Any]]:
    """Every progress point the agent reported for `job_id`, in order, whichever report
    carried it."""
    return [
        point
        for body in fake.status_bodies(job_id)
        for point in [*body.get("points", []), *([body["progress"]] if "progress" in body else [])]
    ]


def idle_after(fake: FakeOrchestrator, earlier: Call) -> Callable[[Call], bool]:
    def match(call: Call) -> bool:
        later = fake.calls[[id(c) for c in fake.calls].index(id(earlier)) :]
        return (
            call[0] == "/api/workers/heartbeat"
            and call[1]["status"] == "idle"
            and any(c is call for c in later)
        )

    return match


def offer(fake: FakeOrchestrator, code: str, *args: str, job_id: str = "j_1") -> None:
    fake.send(
        type="job_submit",
        job_id=job_id,
        attempt_id="a_1",
        config={},
        command=[sys.executable, "-c", code, *args],
        env={},
        gpu_count=0,
        timeout_s=None,
    )


@pytest.fixture
def fake() -> FakeOrchestrator:
    return FakeOrchestrator()


@pytest.fixture
async def start_agent(fake: FakeOrchestrator, tmp_path: Path):
    tasks: list[asyncio.Task[int]] = []

    async def start(
        *, persistent: bool = True, urls: str = "http://orchestrator.test"
    ) -> asyncio.Task[int]:
        settings = AgentSettings(
            orchestrator_url=urls,
            worker_token="wt_test",
            name="w",
            persistent=persistent,
            work_dir=tmp_path,
            cancel_grace=1,
            log_flush_interval=0.05,
            progress_interval=0.05,
            reconnect_base=0.05,
            reconnect_cap=0.2,
        )
        agent = Agent(settings, CPU, OrchestratorClient(settings, transport=fake.transport()))
        task = asyncio.create_task(agent.run())
        tasks.append(task)
        await fake.wait_call(lambda call: call[0] == "/api/workers/stream")
        await asyncio.sleep(0)  # let the stream reader start
        return task

    yield start
    for task in tasks:  # cancelled agents must still kill their jobs and close their pipes
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_ephemeral_agent_acknowledges_runs_reports_and_disconnects(fake, start_agent):
    agent = await start_agent(persistent=False)
    offer(fake, "print('hello'); import sys; print('oops', file=sys.stderr)")

    assert await asyncio.wait_for(agent, 10) == 0
    assert fake.statuses() == ["acknowledged", "running", "completed"]
    assert all(body["attempt_id"] == "a_1" for path, body in fake.calls if "/job/" in path)
    assert sorted(fake.log_lines()) == ["hello", "oops"]
    assert fake.calls[-1] == ("/api/workers/disconnect", {"worker_id": "w_1"})


async def test_a_409_fences_the_job_off_it_is_stopped_and_nothing_more_is_said(fake, start_agent):
    fake.fenced_statuses.add("running")
    await start_agent()
    offer(fake, "import time; print('up', flush=True); time.sleep(60)")

    await fake.wait_call(status("j_1", "running"))
    # Idle again long before the job's 60 s sleep ends: its process was stopped.
    await fake.wait_call(
        lambda call: (
            call[0] == "/api/workers/heartbeat"
            and call[1]["status"] == "idle"
            and call[1]["current_job_id"] is None
        )
    )
    assert fake.statuses() == ["acknowledged", "running"]
    assert fake.log_lines() == []


async def test_output_and_the_result_wait_for_an_orchestrator_that_went_away(
    fake, start_agent, tmp_path: Path
):
    gate, pid = tmp_path / "gate", tmp_path / "pid"
    code = (
        "import os, pathlib, sys, time\n"
        "pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))\nprint('before', flush=True)\n"
        "while not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.02)\nprint('after')"
    )
    await start_agent()
    offer(fake, code, str(gate), str(pid))
    await fake.wait_call(lambda call: "before" in [x["text"] for x in call[1].get("lines", [])])
    job = int(pid.read_text())  # written before 'before'

    fake.go_away()
    gate.touch()
    # The job ends while the orchestrator is away: its last words wait.
    await wait_until_async(lambda: not alive(job), timeout=10, message=f"job {job} to end")
    fake.down = False

    await fake.wait_call(status("j_1", "completed"))
    registers = [body for path, body in fake.calls if path == "/api/workers/register"]
    assert registers[-1]["current_job_id"] == "j_1"
    assert registers[-1]["current_attempt_id"] == "a_1"
    assert fake.log_lines() == ["before", "after"]


async def test_an_offer_whose_acknowledgement_is_refused_is_not_run(fake, start_agent, tmp_path):
    fake.refused_statuses.add("acknowledged")
    await start_agent()
    offer(fake, "print('must not run')")

    await fake.wait_call(status("j_1", "acknowledged"))
    since = next(i for i, (path, _) in enumerate(fake.calls) if path.endswith("/status"))
    # A heartbeat after the refusal says idle: the job was dropped, not started.
    idle = (
        "/api/workers/heartbeat",
        {"worker_id": "w_1", "status": "idle", "current_job_id": None, "current_attempt_id": None},
    )
    await fake.wait_call(lambda call: idle in fake.calls[since:])
    assert fake.statuses() == ["acknowledged"]
    assert not (tmp_path / "jobs").exists()


async def test_abandon_job_on_reconnect_stops_the_job_and_reports_it_cancelled(fake, start_agent):
    await start_agent()
    offer(fake, "import time; print('up', flush=True); time.sleep(60)")
    await fake.wait_call(status("j_1", "running"))

    fake.register_answer = {"abandon_job": True}
    fake.go_away()
    fake.down = False

    await fake.wait_call(status("j_1", "cancelled"))


async def test_a_replica_that_dies_mid_job_is_left_for_the_next_url_and_the_job_carries_on(
    fake, start_agent, tmp_path: Path, caplog
):
    gate = tmp_path / "gate"
    code = (
        "import pathlib, sys, time\nprint('before', flush=True)\n"
        "while not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.02)\nprint('after')"
    )
    caplog.set_level(logging.INFO, logger="gpufleet.worker")
    await start_agent(urls="http://a.test, http://b.test")
    offer(fake, code, str(gate))
    await fake.wait_call(lambda call: "before" in [x["text"] for x in call[1].get("lines", [])])
    fake.register_answer = {"resume_job": {"job_id": "j_1", "attempt_id": "a_1"}}

    fake.kill_host("a.test")
    # Only b can have taken it: a refuses before recording anything.
    await fake.wait_call(
        lambda call: call[0] == "/api/workers/register" and call[1]["current_job_id"] == "j_1"
    )
    await fake.wait_call(lambda call: call[0] == "/api/workers/stream" and fake.stream is not None)
    gate.touch()

    await fake.wait_call(status("j_1", "completed"))
    assert fake.statuses() == ["acknowledged", "running", "completed"]  # one run, no restart
    assert fake.log_lines() == ["before", "after"]
    assert "orchestrator http://a.test unreachable; trying http://b.test" in caplog.messages
    assert "the orchestrator resumes job j_1/a_1 on this worker" in caplog.messages


async def test_a_busy_agent_does_not_acknowledge_a_second_offer(fake, start_agent):
    await start_agent()
    offer(fake, "import time; time.sleep(60)")
    await fake.wait_call(status("j_1", "running"))

    offer(fake, "print('second')", job_id="j_2")
    fake.send(type="job_cancel", job_id="j_1", attempt_id="a_1", reason="test over")

    await fake.wait_call(status("j_1", "cancelled"))
    assert fake.statuses("j_2") == []


async def test_an_offer_that_outruns_the_answer_to_the_last_report_is_taken_at_once(
    fake, start_agent
):
    """The orchestrator frees the worker as it commits the report, and its next offer (here
    the same job's next attempt) can arrive before the report's answer: nothing resends it."""

    async def offer_first(call: Call) -> None:
        if call[1].get("status") == "failed" and call[1]["attempt_id"] == "a_1":
            fake.send(type="job_submit", job_id="j_1", attempt_id="a_2", command=["true"])
            stream = fake.stream
            await wait_until_async(lambda: stream.empty(), timeout=5, message="the offer read")
            await asyncio.sleep(0.05)  # the stream reader hands it to the agent

    fake.before_answer = offer_first
    await start_agent()
    fake.send(type="job_submit", job_id="j_1", attempt_id="a_1", command=["/no/such/exe"])

    second = await fake.wait_call(lambda c: c[1].get("attempt_id") == "a_2", within=5)
    assert second[1]["status"] == "acknowledged"


async def test_shutdown_cancels_the_running_job_and_ends_the_agent(fake, start_agent):
    agent = await start_agent()
    offer(fake, "import time; time.sleep(60)")
    await fake.wait_call(status("j_1", "running"))

    fake.send(type="shutdown", reason="worker deleted")

    assert await asyncio.wait_for(agent, 10) == 0
    assert fake.statuses()[-1] == "cancelled"


async def test_a_persistent_agent_reports_every_unrunnable_offer_failed_and_runs_the_next_job(
    fake, start_agent, tmp_path
):
    agent = await start_agent()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j_blocked").write_text("a file where the job folder goes")
    blocked = {
        "type": "job_submit",
        "job_id": "j_blocked",
        "attempt_id": "a_blocked",
        "command": [sys.executable, "-c", "print(1)"],
    }
    cases = [*unrunnable_offers(), ("job folder blocked", blocked)]

    for case, event in cases:
        fake.send(**event)
        failed = await fake.wait_call(status(event["job_id"], "failed"))
        await fake.wait_call(idle_after(fake, failed))  # free for the next offer
        bodies = fake.status_bodies(event["job_id"])
        assert [b["status"] for b in bodies] == ["acknowledged", "failed"], case
        assert bodies[-1]["attempt_id"] == event["attempt_id"], case
        assert bodies[-1]["error"].startswith("could not start: "), (case, bodies[-1])
        assert not agent.done(), case
    errors = {case: fake.status_bodies(e["job_id"])[-1]["error"] for case, e in cases}
    assert "BAD=KEY" in errors["env name with ="]
    assert "no-such-trainer-gpufleet-test" in errors["executable missing"]
    assert "job folder" in errors["job folder blocked"]

    for event in nameless_offers():
        fake.send(**event)
    for data in NOT_EVENTS:
        fake.send_raw(data)
    offer(fake, "print('still here')", job_id="j_good")

    await fake.wait_call(status("j_good", "completed"), within=20)
    assert fake.log_lines("j_good") == ["still here"]
    assert not fake.statuses("j_nameless")  # named no attempt a report could speak for
    assert not agent.done()


@pytest.mark.parametrize("case", ["env name with =", "command with a NUL", "config a list"])
async def test_an_ephemeral_agent_reports_an_unrunnable_offer_failed_and_exits_cleanly(
    fake, start_agent, case
):
    agent = await start_agent(persistent=False)
    event = dict(unrunnable_offers())[case]

    fake.send(**event)

    assert await asyncio.wait_for(agent, 10) == 0
    assert fake.statuses(event["job_id"]) == ["acknowledged", "failed"]
    assert fake.calls[-1][0] == "/api/workers/disconnect"


async def test_progress_in_flight_when_the_job_ends_is_not_lost(fake, start_agent, tmp_path):
    """The relay was cancelled when the job ended: a report it was sending then, with the
    points it had taken, was cut off, and the job's chart ended short of its last step."""
    fake.held_progress = asyncio.Event()
    gate = tmp_path / "gate"
    await start_agent()
    code = r"""
import os, pathlib, sys, time
with open(os.environ["GPUFLEET_PROGRESS_FILE"], "a") as f:
    for step in range(1, 11):
        f.write('{"step": %d, "total": 10}\n' % step)
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.02)
"""
    offer(fake, code, str(gate))
    # The relay has taken all ten steps and waits on its send; then the job ends.
    await wait_until_async(
        lambda: "running" in fake.statuses(), timeout=10, message="the job to run"
    )
    await asyncio.sleep(0.3)  # several relay intervals: the report with the steps is in flight
    gate.touch()
    await asyncio.sleep(0.3)  # the job has ended while that report waits for its answer
    fake.held_progress.set()

    await fake.wait_call(status("j_1", "completed"), within=20)
    steps = [point["step"] for point in reported_progress(fake)]
    assert sorted(steps) == list(range(1, 11)), steps


async def test_output_and_progress_reach_the_orchestrator_in_a_form_it_stores(fake, start_agent):
    """NUL becomes U+FFFD, NaN null; a progress line too deep to parse is skipped."""
    await start_agent()
    code = r"""
import os, sys
sys.stdout.write("nul\0here\n")
with open(os.environ["GPUFLEET_PROGRESS_FILE"], "a") as f:
    f.write("[" * 100000 + "]" * 100000 + "\n")
    f.write('{"step": 1, "total": NaN, "metrics": {"lo\\u0000ss": "x\\u0000", "a": Infinity}}\n')
"""
    offer(fake, code)

    await fake.wait_call(status("j_1", "completed"), within=20)
    assert fake.log_lines() == ["nul\ufffdhere"]
    # The point rides on whichever report the relay sends first after it: a `running` one
    # or the final `completed` one.
    assert reported_progress(fake) == [
        {"step": 1, "total": None, "metrics": {"lo\ufffdss": "x\ufffd", "a": None}}
    ]
    assert not any("\\u0000" in json.dumps(body) for _, body in fake.calls)
