"""The agent's artifact life, with real job processes (the example training job) against the
fake orchestrator of test_runner_agent plus a working fake of the artifact routes: uploads
before the final report, SIGTERM as a preemption, and a preempted job resumed elsewhere."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.worker.agent import Agent
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.settings import AgentSettings
from tests.artifact_fake import ArtifactFake
from tests.unit.test_runner_agent import CPU, FakeOrchestrator

TRAIN = [sys.executable, "-m", "gpufleet.examples.train", "--backend", "numpy", "--steps"]


class Orchestrator(FakeOrchestrator):
    def __init__(self) -> None:
        super().__init__()
        self.artifacts = ArtifactFake()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.artifacts.handles(request):
            return await super().handle(request)
        answer = await self.artifacts.handle(request)
        self.calls.append(
            (request.url.path, {"method": request.method, "code": answer.status_code})
        )
        self._changed.set()
        return answer

    def index(self, match: Any) -> int:
        return next(i for i, call in enumerate(self.calls) if match(call))


@pytest.fixture
def fake() -> Orchestrator:
    return Orchestrator()


@pytest.fixture
async def start_agent(fake: Orchestrator, tmp_path: Path):
    tasks: list[asyncio.Task[int]] = []

    async def start(
        *, persistent: bool = False, grace: float = 20
    ) -> tuple[Agent, asyncio.Task[int]]:
        settings = AgentSettings(
            orchestrator_url="http://orchestrator.test",
            worker_token="wt_test",
            name="w",
            persistent=persistent,
            work_dir=tmp_path / "work",
            cancel_grace=2,
            preempt_grace=grace,
            log_flush_interval=0.05,
            progress_interval=0.05,
            reconnect_base=0.05,
            reconnect_cap=0.2,
        )
        agent = Agent(settings, CPU, OrchestratorClient(settings, transport=fake.transport()))
        task = asyncio.create_task(agent.run())
        tasks.append(task)
        await fake.wait_call(lambda call: call[0] == "/api/workers/stream")
        await asyncio.sleep(0)
        return agent, task

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def offer(fake: Orchestrator, command: list[str], *, attempt: str = "a_1", **extra: Any) -> None:
    fake.send(
        type="job_submit",
        job_id="j_1",
        attempt_id=attempt,
        config=extra.pop("config", {}),
        command=command,
        env={},
        gpu_count=0,
        timeout_s=None,
        **extra,
    )


def is_status(value: str) -> Any:
    return lambda call: call[0].endswith("/status") and call[1].get("status") == value


async def test_artifacts_and_checkpoints_are_uploaded_before_the_report_and_the_exit(
    fake: Orchestrator, start_agent: Any, tmp_path: Path
) -> None:
    _, task = await start_agent()
    offer(fake, [*TRAIN, "60", "--checkpoint-every", "20"])

    assert await asyncio.wait_for(task, 30) == 0
    blobs = fake.artifacts.blobs
    assert sorted(path for _, path in blobs) == [
        "output/checkpoint-20/state.json",
        "output/checkpoint-20/weights.npz",
        "output/checkpoint-40/state.json",
        "output/checkpoint-40/weights.npz",
        "result.json",
    ]
    folder = tmp_path / "work/jobs/j_1/a_1"
    assert blobs[("a_1", "result.json")] == (folder / "result.json").read_bytes()
    assert [c["name"] for c in fake.artifacts.checkpoints.values()] == [
        "checkpoint-20",
        "checkpoint-40",
    ]
    announced = {b["path"]: b["kind"] for b in fake.artifacts.announced.values()}
    assert announced["result.json"] == "artifact"  # each file once, checkpoints as such
    assert len(announced) == len(fake.artifacts.announced) == 5
    last_upload = max(i for i, call in enumerate(fake.calls) if "/upload" in call[0])
    assert last_upload < fake.index(is_status("completed"))
    assert fake.calls[-1][0] == "/api/workers/disconnect"
    completed = fake.status_bodies()[-1]
    assert completed["status"] == "completed" and completed["error"] is None


async def test_a_failed_upload_is_named_in_the_report_and_the_job_stays_completed(
    fake: Orchestrator, start_agent: Any
) -> None:
    fake.artifacts.refuse_paths.add("result.json")
    _, task = await start_agent()
    offer(fake, [*TRAIN, "20"])

    assert await asyncio.wait_for(task, 30) == 0
    final = fake.status_bodies()[-1]
    assert final["status"] == "completed"
    assert "1 upload(s) failed: result.json" in final["error"]


async def test_a_keep_rule_that_leaves_the_folder_fails_the_attempt_before_it_starts(
    fake: Orchestrator, start_agent: Any
) -> None:
    _, task = await start_agent()
    offer(fake, [*TRAIN, "20"], config={"checkpoints": "../../*"})

    assert await asyncio.wait_for(task, 30) == 0
    final = fake.status_bodies()[-1]
    assert final["status"] == "failed"
    assert final["error"].startswith("could not start: job j_1: checkpoints '../../*' is refused")


async def test_sigterm_checkpoints_a_job_that_handles_it_then_reports_it_preempted(
    fake: Orchestrator, start_agent: Any
) -> None:
    agent, task = await start_agent(persistent=True)
    offer(fake, [*TRAIN, "2000", "--step-delay", "0.01"])
    await fake.wait_call(lambda call: call[1].get("progress") is not None)

    agent.request_preempt()

    assert await asyncio.wait_for(task, 30) == 0
    (checkpoint,) = fake.artifacts.checkpoints.values()
    assert checkpoint["name"].startswith("checkpoint-") and checkpoint["step"] > 0
    final = fake.status_bodies()[-1]
    assert final == {
        "attempt_id": "a_1",
        "status": "preempted",
        "error": "the worker's machine is going away (SIGTERM)",
    }
    commit = fake.index(lambda call: call[0].endswith("/checkpoints"))
    assert commit < fake.index(is_status("preempted"))
    assert fake.calls[-1][0] == "/api/workers/disconnect"


async def test_a_job_that_does_not_handle_the_signal_is_never_sent_it(
    fake: Orchestrator, start_agent: Any
) -> None:
    # An unhandled SIGUSR1 would kill this job without a word; SIGTERM makes it speak.
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('got TERM', flush=True), sys.exit(3)))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    agent, task = await start_agent(persistent=True)
    offer(fake, [sys.executable, "-c", code])
    await fake.wait_call(lambda call: "up" in [x["text"] for x in call[1].get("lines", [])])

    agent.request_preempt()

    assert await asyncio.wait_for(task, 30) == 0
    assert "got TERM" in fake.log_lines()
    assert fake.status_bodies()[-1]["status"] == "preempted"
    assert fake.artifacts.checkpoints == {}


async def test_a_second_sigterm_stops_the_job_at_once_and_uploads_nothing_more(
    fake: Orchestrator, start_agent: Any
) -> None:
    code = (
        "import time\n"
        "from gpufleet.progress import on_checkpoint_signal\n"
        "on_checkpoint_signal(lambda: None)  # says it will, never does\n"
        "open('result.json', 'w').write('{}')\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    agent, task = await start_agent(persistent=True, grace=60)
    offer(fake, [sys.executable, "-c", code])
    await fake.wait_call(lambda call: "up" in [x["text"] for x in call[1].get("lines", [])])
    await asyncio.sleep(0.2)  # the worker reads that the job handles the signal

    agent.request_preempt()
    await asyncio.sleep(0.3)
    agent.request_preempt()

    assert await asyncio.wait_for(task, 10) == 0  # far within the 60 s grace
    assert fake.status_bodies()[-1]["status"] == "preempted"
    assert fake.artifacts.announced == {}


async def test_a_preempted_job_resumes_from_its_checkpoint_and_ends_as_an_unbroken_run(
    fake: Orchestrator, start_agent: Any, tmp_path: Path
) -> None:
    args = ["300", "--step-delay", "0.005", "--checkpoint-every", "50", "--seed", "7"]
    whole = tmp_path / "whole"
    whole.mkdir()
    command = [*TRAIN, args[0], "--seed", "7"]
    await asyncio.to_thread(subprocess.run, command, cwd=whole, check=True, capture_output=True)

    agent, task = await start_agent(persistent=True)
    offer(fake, [*TRAIN, *args])
    await fake.wait_call(lambda call: call[0].endswith("/checkpoints"))
    agent.request_preempt()
    assert await asyncio.wait_for(task, 30) == 0
    assert fake.status_bodies()[-1]["status"] == "preempted"
    newest_id, newest = list(fake.artifacts.checkpoints.items())[-1]

    # The orchestrator requeues it: attempt a_2 on a fresh worker, resuming from the newest.
    fake.artifacts.live_attempt = "a_2"
    _, task = await start_agent()
    resume = {
        "checkpoint_id": newest_id,
        "name": newest["name"],
        "path": newest["path"],
        "step": newest["step"],
        "attempt_id": "a_1",
        "attempt_number": 1,
    }
    offer(fake, [*TRAIN, *args], attempt="a_2", resume=resume)
    assert await asyncio.wait_for(task, 30) == 0

    runs = [b for b in fake.status_bodies() if b["attempt_id"] == "a_2" and b.get("progress")]
    assert runs[0]["progress"]["step"] > newest["step"]  # it went on, not from step 0
    assert fake.status_bodies()[-1]["status"] == "completed"
    result = fake.artifacts.blobs[("a_2", "result.json")]
    assert result == (whole / "result.json").read_bytes()
    assert json.loads(result)["steps"] == 300
    # The checkpoint it resumed from was not stored again as attempt a_2's.
    assert not any(
        a == "a_2" and p.startswith(newest["path"] + "/") for a, p in fake.artifacts.blobs
    )
