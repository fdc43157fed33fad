"""Artifacts put in place for the user-API and retention tests, through real routes and a
real store: files a SimpleTuner trainer PUTs through `/api/cloud/storage` with its attempt's
upload token, and checkpoints uploaded and committed through the worker API."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from tests.api.artifacts.uploads import upload_checkpoint
from tests.api.conftest import Agent, Fleet
from tests.api.test_simpletuner_dialect import SIMPLETUNER_JOB


@dataclass
class Run:
    """A SimpleTuner job running on a scripted agent, and the offer of its live attempt."""

    fleet: Fleet
    agent: Agent
    offer: dict[str, Any]

    @property
    def job_id(self) -> str:
        job_id: str = self.offer["job_id"]
        return job_id

    @property
    def attempt_id(self) -> str:
        attempt_id: str = self.offer["attempt_id"]
        return attempt_id

    async def put(self, rest: str, data: bytes) -> None:
        """What the trainer's publisher sends for `<output_dir name>/<rest>`."""
        answer = await self.fleet.http.put(
            f"/api/cloud/storage/gpufleet/{self.job_id}/{rest}",
            content=data,
            headers={"X-SimpleTuner-Secret": self.offer["upload_token"]},
        )
        assert answer.status_code == 200, answer.text

    async def checkpoint(self, name: str, step: int, files: dict[str, bytes]) -> str:
        """A committed checkpoint of the live attempt at `output/<name>/`, uploaded and
        committed through the worker API as a worker does; its id."""
        assert name == f"checkpoint-{step}"
        committed = await upload_checkpoint(self.agent, self.offer, step, files)
        assert committed.status_code == 201, committed.text
        checkpoint_id: str = committed.json()["id"]
        return checkpoint_id

    async def fail_and_retry(self) -> None:
        """The attempt fails; the job is retried on the same agent: `offer` is the new one."""
        answer = await self.agent.report(self.job_id, "failed", error="boom")
        assert answer.status_code == 200, answer.text
        self.offer = await self.agent.next_offer()
        await self.agent.run(self.offer, dialect="simpletuner")

    async def preempt(self) -> None:
        """The machine goes away: the attempt is preempted and the job offered again, on the
        same agent, with `resume` naming the latest checkpoint."""
        answer = await self.agent.report(
            self.job_id, "preempted", attempt_id=self.attempt_id, error="spot notice"
        )
        assert answer.status_code == 200, answer.text
        self.offer = await self.agent.next_offer()
        await self.agent.run(self.offer, dialect="simpletuner")

    async def finish(self) -> None:
        answer = await self.agent.report(self.job_id, "completed")
        assert answer.status_code == 200, answer.text


async def start_run(fleet: Fleet, **submit: Any) -> Run:
    """A new agent of its own lane (so no other idle agent takes the job) runs a new job."""
    lane = {"lane": secrets.token_hex(4)}
    agent = await fleet.create_worker(f"st-{lane['lane']}", labels=lane, worker_type="persistent")
    await agent.connect(gpu_info={"name": "GPU", "vram_gb": 24, "count": 1}, features=None)
    submit.setdefault("config", {**SIMPLETUNER_JOB, "output_dir": "output/models"})
    await fleet.submit(max_retries=3, retry_on=["failed", "lost"], worker_labels=lane, **submit)
    offer = await agent.next_offer()
    await agent.run(offer, dialect="simpletuner")
    return Run(fleet, agent, offer)


async def stored_keys(fleet: Fleet) -> list[str]:
    return [found.key for found in await fleet.ctx.artifacts.list("jobs")]
