"""The agent's artifact life, with real job processes (the example training job), a real
`Agent` and the real orchestrator on a real socket (tests/worker_orchestrator.py): uploads
before the final report, SIGTERM as a preemption, and a preempted job resumed elsewhere. What
happened is read back through the user API; the agent's requests are seen on its `Wire`."""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.worker.agent import Agent
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.settings import AgentSettings
from tests.api.conftest import Fleet
from tests.unit.test_runner_agent import CPU
from tests.waiting import wait_until_async
from tests.worker_orchestrator import Sent, Wire, module_fleets, url_of

TRAIN = [sys.executable, "-m", "gpufleet.examples.train", "--backend", "numpy", "--steps"]
on_the_fleet = pytest.mark.asyncio(loop_scope="module")


orchestrator, *_ = module_fleets()  # one orchestrator for the module


class Lane:
    """Workers of their own label, real agents among them, and the jobs sent to them."""

    def __init__(self, fleet: Fleet, work: Path) -> None:
        self.fleet = fleet
        self.work = work
        self.labels = {"lane": secrets.token_hex(4)}
        self.tasks: list[asyncio.Task[int]] = []

    async def start_agent(
        self, *, persistent: bool = False, grace: float = 20, wire: Wire | None = None
    ) -> tuple[Agent, asyncio.Task[int], Wire]:
        """A real agent, as a new worker of this lane, its event stream open."""
        worker = await self.fleet.create_worker(
            f"w-{self.labels['lane']}-{len(self.tasks)}",
            labels=self.labels,
            worker_type="persistent" if persistent else None,
        )
        settings = AgentSettings(
            orchestrator_url=url_of(self.fleet),
            worker_token=worker.token,
            name=worker.name,
            labels=self.labels,
            persistent=persistent,
            work_dir=self.work,
            cancel_grace=2,
            preempt_grace=grace,
            log_flush_interval=0.05,
            progress_interval=0.05,
            reconnect_base=0.05,
            reconnect_cap=0.2,
        )
        wire = wire or Wire()
        agent = Agent(settings, CPU, OrchestratorClient(settings, transport=wire))
        task = asyncio.create_task(agent.run())
        self.tasks.append(task)

        async def streaming() -> bool:
            if task.done():
                task.result()
            return any(
                s.url.split("?")[0].endswith("/stream") and s.status == 200 for s in wire.sent
            )

        await wait_until_async(streaming, timeout=20, message="the agent's event stream")
        return agent, task, wire

    async def submit(self, command: list[str], **config: Any) -> str:
        job = await self.fleet.submit(
            config={"command": command, **config},
            worker_labels=self.labels,
            max_retries=0,
        )
        return str(job["id"])

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.fleet.job(job_id)

    async def listing(self, job_id: str) -> dict[str, Any]:
        answer = await self.fleet.admin.get(f"/api/queue/{job_id}/artifacts")
        assert answer.status_code == 200, answer.text
        listing: dict[str, Any] = answer.json()
        return listing

    async def log_lines(self, job_id: str) -> list[str]:
        answer = await self.fleet.admin.get(f"/api/queue/{job_id}/logs")
        assert answer.status_code == 200, answer.text
        return [line["text"] for line in answer.json()["lines"]]


@pytest_asyncio.fixture(loop_scope="module")
async def lane(orchestrator: Fleet, tmp_path: Path) -> AsyncIterator[Lane]:
    made = Lane(orchestrator, tmp_path / "work")
    yield made
    for task in made.tasks:
        task.cancel()
    await asyncio.gather(*made.tasks, return_exceptions=True)


def statuses(wire: Wire) -> list[dict[str, Any]]:
    """The status reports the agent sent (and the orchestrator answered)."""
    return [s.body for s in wire.sent if s.url.endswith("/status") and s.status == 200]


def index(wire: Wire, match: Callable[[Sent], bool]) -> int:
    return next(i for i, sent in enumerate(wire.sent) if match(sent))


def is_status(value: str) -> Callable[[Sent], bool]:
    return lambda s: s.url.endswith("/status") and s.body.get("status") == value


@on_the_fleet
async def test_artifacts_and_checkpoints_are_uploaded_before_the_report_and_the_exit(
    lane: Lane,
) -> None:
    _, task, wire = await lane.start_agent()
    job_id = await lane.submit([*TRAIN, "60", "--checkpoint-every", "20"])

    assert await asyncio.wait_for(task, 30) == 0
    job = await lane.job(job_id)
    assert (job["status"], job["error"]) == ("completed", None)
    listing = await lane.listing(job_id)
    stored = {a["path"]: a for a in listing["artifacts"]}
    assert sorted(stored) == [
        "output/checkpoint-20/state.json",
        "output/checkpoint-20/weights.npz",
        "output/checkpoint-40/state.json",
        "output/checkpoint-40/weights.npz",
        "result.json",
    ]
    assert {p: a["kind"] for p, a in stored.items()}["result.json"] == "artifact"
    assert {a["kind"] for p, a in stored.items() if p != "result.json"} == {"checkpoint"}
    attempt = job["current_attempt_id"]
    result = await lane.fleet.admin.get(f"/api/queue/{job_id}/artifacts/result.json")
    assert result.content == (lane.work / "jobs" / job_id / attempt / "result.json").read_bytes()
    assert sorted(c["name"] for c in listing["checkpoints"]) == ["checkpoint-20", "checkpoint-40"]
    assert len(wire.announces()) == 5  # each file once, checkpoints as such
    last_upload = max(i for i, sent in enumerate(wire.sent) if "/upload" in sent.url)
    assert last_upload < index(wire, is_status("completed"))
    assert wire.sent[-1].url.endswith("/api/workers/disconnect")


@on_the_fleet
async def test_a_failed_upload_is_named_in_the_report_and_the_job_stays_completed(
    lane: Lane,
) -> None:
    code = (
        "import os\n"
        "os.makedirs('output')\n"
        "open('output/weights.bin#1', 'w').write('x')  # a name the store refuses\n"
        "open('result.json', 'w').write('{}')\n"
    )
    _, task, _ = await lane.start_agent()
    job_id = await lane.submit([sys.executable, "-c", code])

    assert await asyncio.wait_for(task, 30) == 0
    job = await lane.job(job_id)
    assert job["status"] == "completed"
    (attempt,) = job["attempt_history"]
    assert attempt["status"] == "completed"
    # The worker refuses the name itself, as the orchestrator would (artifacts/keys.py).
    assert attempt["error"].startswith(
        "1 upload(s) failed: output/weights.bin#1: artifact path 'output/weights.bin#1' is refused"
    )
    assert [a["path"] for a in (await lane.listing(job_id))["artifacts"]] == ["result.json"]


@on_the_fleet
async def test_a_keep_rule_that_leaves_the_folder_fails_the_attempt_before_it_starts(
    lane: Lane,
) -> None:
    _, task, _ = await lane.start_agent()
    job_id = await lane.submit([*TRAIN, "20"], checkpoints="../../*")

    assert await asyncio.wait_for(task, 30) == 0
    job = await lane.job(job_id)
    assert job["status"] == "failed"
    assert job["error"].startswith(f"could not start: job {job_id}: checkpoints '../../*' is ")


@on_the_fleet
async def test_sigterm_checkpoints_a_job_that_handles_it_then_reports_it_preempted(
    lane: Lane,
) -> None:
    agent, task, wire = await lane.start_agent(persistent=True)
    job_id = await lane.submit([*TRAIN, "2000", "--step-delay", "0.01"])
    await wait_until_async(
        lambda: any(b.get("progress") for b in statuses(wire)),
        timeout=20,
        message="a progress report",
    )

    agent.request_preempt()

    assert await asyncio.wait_for(task, 30) == 0
    (checkpoint,) = (await lane.listing(job_id))["checkpoints"]
    assert checkpoint["name"].startswith("checkpoint-") and checkpoint["step"] > 0
    job = await lane.job(job_id)
    first, *others = job["attempt_history"]
    assert (first["status"], first["error"]) == (
        "preempted",
        "the worker's machine is going away (SIGTERM)",
    )
    # Requeued for the next worker of its lane; offered back to this one as it left, the
    # offer was withdrawn when it disconnected.
    assert job["status"] == "queued"
    assert [a["status"] for a in others] in ([], ["withdrawn"])
    commit = index(wire, lambda s: s.url.endswith("/checkpoints") and s.status == 201)
    assert commit < index(wire, is_status("preempted"))
    assert wire.sent[-1].url.endswith("/api/workers/disconnect")


@on_the_fleet
async def test_a_job_that_does_not_handle_the_signal_is_never_sent_it(lane: Lane) -> None:
    # An unhandled SIGUSR1 would kill this job without a word; SIGTERM makes it speak.
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('got TERM', flush=True), sys.exit(3)))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    agent, task, _ = await lane.start_agent(persistent=True)
    job_id = await lane.submit([sys.executable, "-c", code])
    await wait_until_async(lambda: _has_line(lane, job_id, "up"), timeout=20, message="'up'")

    agent.request_preempt()

    assert await asyncio.wait_for(task, 30) == 0
    assert "got TERM" in await lane.log_lines(job_id)
    assert (await lane.job(job_id))["attempt_history"][0]["status"] == "preempted"
    assert (await lane.listing(job_id))["checkpoints"] == []


async def _has_line(lane: Lane, job_id: str, text: str) -> bool:
    return text in await lane.log_lines(job_id)


@on_the_fleet
async def test_a_second_sigterm_stops_the_job_at_once_and_uploads_nothing_more(
    lane: Lane,
) -> None:
    code = (
        "import time\n"
        "from gpufleet.progress import on_checkpoint_signal\n"
        "on_checkpoint_signal(lambda: print('asked', flush=True))  # says it will, never does\n"
        "open('result.json', 'w').write('{}')\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    agent, task, wire = await lane.start_agent(persistent=True, grace=60)
    job_id = await lane.submit([sys.executable, "-c", code])
    await wait_until_async(lambda: _has_line(lane, job_id, "up"), timeout=20, message="'up'")

    agent.request_preempt()
    # The job was sent the checkpoint signal: the worker now waits out its grace for one.
    await wait_until_async(
        lambda: _has_line(lane, job_id, "asked"), timeout=20, message="the checkpoint signal"
    )
    agent.request_preempt()

    assert await asyncio.wait_for(task, 10) == 0  # far within the 60 s grace
    assert (await lane.job(job_id))["attempt_history"][0]["status"] == "preempted"
    assert wire.announces() == []
    assert (await lane.listing(job_id))["artifacts"] == []


@on_the_fleet
async def test_a_preempted_job_resumes_from_its_checkpoint_and_ends_as_an_unbroken_run(
    lane: Lane, tmp_path: Path
) -> None:
    # 6 s of steps: the first checkpoint is committed, and the preemption lands, long before
    # the end even on a loaded machine (at 1.5 s, the run sometimes ended first under load).
    # The resumed attempt (GPUFLEET_RESUME_FROM set) takes its steps without the delay, which
    # changes no result: the unbroken run below has none either.
    args = ["600", "--checkpoint-every", "50", "--seed", "7", "--step-delay", "0.01"]
    whole = tmp_path / "whole"
    whole.mkdir()
    command = [*TRAIN, args[0], "--seed", "7"]
    await asyncio.to_thread(subprocess.run, command, cwd=whole, check=True, capture_output=True)

    agent, task, _ = await lane.start_agent(persistent=True)
    fast_on_resume = "${GPUFLEET_RESUME_FROM:+--step-delay 0}"  # argparse: the last one wins
    job_id = await lane.submit(["sh", "-c", f"exec {shlex.join([*TRAIN, *args])} {fast_on_resume}"])

    async def committed() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await lane.listing(job_id))["checkpoints"]
        return found

    await wait_until_async(committed, timeout=20, message="a committed checkpoint")
    agent.request_preempt()
    assert await asyncio.wait_for(task, 30) == 0
    first = (await lane.job(job_id))["attempt_history"][0]
    assert first["status"] == "preempted"
    newest = max(await committed(), key=lambda c: c["step"])

    # The orchestrator requeued it: the next worker of the lane takes it, resuming.
    _, task, wire = await lane.start_agent()
    assert await asyncio.wait_for(task, 30) == 0

    job = await lane.job(job_id)
    assert job["status"] == "completed"
    second = job["attempt_history"][-1]
    assert second["resumed_from"] == {
        "checkpoint": newest["name"],
        "step": newest["step"],
        "attempt_number": 1,
    }
    runs = [b for b in statuses(wire) if b.get("progress")]
    assert runs[0]["progress"]["step"] > newest["step"]  # it went on, not from step 0
    result = await lane.fleet.admin.get(
        f"/api/queue/{job_id}/artifacts/result.json", params={"attempt_id": second["id"]}
    )
    assert result.content == (whole / "result.json").read_bytes()
    assert json.loads(result.content)["steps"] == 600
    # The checkpoint it resumed from was not stored again as the second attempt's.
    assert not any(
        a["attempt_id"] == second["id"] and a["path"].startswith(newest["path"] + "/")
        for a in (await lane.listing(job_id))["artifacts"]
    )


@on_the_fleet
async def test_a_worker_that_said_goodbye_does_not_register_again(lane: Lane) -> None:
    """The goodbye closes the worker's event stream; the agent must not take that for a
    broken stream and register again (the worker would look alive after it left). The
    goodbye's answer comes late, as over a slow link, so a reconnect would have its time."""
    wire = Wire(slow=lambda request: 0.5 if request.url.path.endswith("/disconnect") else 0)
    _, task, _ = await lane.start_agent(wire=wire)
    job_id = await lane.submit([sys.executable, "-c", "print('done')"])

    assert await asyncio.wait_for(task, 30) == 0
    assert (await lane.job(job_id))["status"] == "completed"
    goodbye = index(wire, lambda s: s.url.endswith("/api/workers/disconnect"))
    assert [s.url for s in wire.sent[goodbye + 1 :]] == []
    workers = (await lane.fleet.admin.get("/api/admin/workers")).json()["workers"]
    (worker,) = [w for w in workers if w["labels"] == lane.labels]
    assert worker["status"] == "offline"
