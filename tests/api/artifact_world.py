"""Artifacts put in place for the user-API and retention tests, through real routes and a
real store: files a SimpleTuner trainer PUTs through `/api/cloud/storage` with its attempt's
upload token, and committed checkpoints written as the worker API writes them (bytes in the
store first, then the rows, in one transaction)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gpufleet.artifacts.keys import artifact_key
from gpufleet.server.context import transaction
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
        """A committed checkpoint of the live attempt at `output/<name>/`; its id."""
        ctx = self.fleet.ctx
        rows = []
        for rel, data in files.items():
            path = f"output/{name}/{rel}"
            key = artifact_key(self.job_id, self.attempt_id, path)
            stored = await ctx.artifacts.write(
                key, _chunks(data), sha256=hashlib.sha256(data).hexdigest()
            )
            rows.append((path, key, stored.size, stored.sha256))
        checkpoint_id = f"k_{secrets.token_hex(6)}"
        async with transaction(ctx) as tx:
            for path, key, size, sha in rows:
                await tx.q.insert_artifact(
                    {
                        "id": f"r_{secrets.token_hex(6)}",
                        "job_id": self.job_id,
                        "attempt_id": self.attempt_id,
                        "path": path,
                        "kind": "checkpoint",
                        "checkpoint": name,
                        "size": size,
                        "sha256": sha,
                        "key": key,
                        "created_at": tx.now,
                    }
                )
            await tx.q.insert_checkpoint(
                {
                    "id": checkpoint_id,
                    "job_id": self.job_id,
                    "attempt_id": self.attempt_id,
                    "name": name,
                    "path": f"output/{name}",
                    "step": step,
                    "files": len(rows),
                    "size": sum(r[2] for r in rows),
                    "created_at": tx.now,
                }
            )
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


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


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
