"""A job on a scripted worker that sends its files home through the worker API of
docs/artifacts.md (announce, send, finish; commit a checkpoint), as an agent does: for the
CLI's and the browser's tests of #17, with no worker process."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from bench.s3 import new_bucket, s3_environment

from tests.e2e.conftest import FakeWorker, ServerProcess, submit_job, unique


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Attempt:
    """A job running on a scripted worker of its own; `attempt_id` is its live attempt."""

    def __init__(self, server: ServerProcess) -> None:
        tag = {"pool": unique("art")}
        self.server = server
        self.worker = FakeWorker(server, unique("art"), labels=tag)
        self.worker.register(labels=tag)
        self.stream = self.worker.connect()
        self.worker.keep_alive()  # the browser tests' server gives up on a silent one in 3 s
        self.job_id = submit_job(server, tag, ["true"])
        self._take_offer()

    def _take_offer(self) -> None:
        self.offer = self.stream.next("job_submit")
        self.attempt_id: str = self.offer["attempt_id"]
        for status in ("acknowledged", "running"):
            resp = self.worker.report(self.job_id, status, attempt_id=self.attempt_id)
            assert resp.status_code == 200, resp.text

    def upload(self, path: str, data: bytes, checkpoint: str | None = None) -> dict[str, Any]:
        """Announce the file, send its bytes where the answer says, finish; its record."""
        announce = {
            "attempt_id": self.attempt_id,
            "path": path,
            "size": len(data),
            "sha256": sha(data),
            "kind": "checkpoint" if checkpoint else "artifact",
            "checkpoint": checkpoint,
        }
        base = f"/api/workers/job/{self.job_id}/upload"
        with self.worker.http() as c:
            resp = c.post(base, json=announce)
            assert resp.status_code == 200, resp.text
            plan = resp.json()
            if plan["via"] == "orchestrator":
                resp = c.put(plan["url"], content=data, headers=plan["headers"])
            else:  # straight to the bucket, without the worker's token; then the finish
                with httpx.Client(timeout=30) as bucket:
                    put = bucket.put(plan["url"], content=data, headers=plan["headers"])
                assert put.status_code == 200, put.text
                resp = c.post(f"{base}/{plan['upload_id']}/complete")
            assert resp.status_code == 201, resp.text
            return dict(resp.json())

    def checkpoint(self, name: str, step: int, files: dict[str, bytes]) -> str:
        """The files uploaded under `output/<name>/`, then committed; the checkpoint's id."""
        for rel, data in files.items():
            self.upload(f"output/{name}/{rel}", data, checkpoint=name)
        body = {
            "attempt_id": self.attempt_id,
            "name": name,
            "path": f"output/{name}",
            "step": step,
            "files": [
                {"path": f"output/{name}/{rel}", "size": len(d), "sha256": sha(d)}
                for rel, d in files.items()
            ],
        }
        resp = self.worker.post(f"/api/workers/job/{self.job_id}/checkpoints", body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def preempt(self) -> dict[str, Any]:
        """The worker's machine goes away: it reports `preempted`, and the job comes back to
        it as the next attempt, whose offer says what to resume from (returned)."""
        resp = self.worker.report(self.job_id, "preempted", attempt_id=self.attempt_id)
        assert resp.status_code == 200, resp.text
        self._take_offer()
        resume: dict[str, Any] = self.offer["resume"]
        return resume

    def finish(self) -> None:
        resp = self.worker.report(self.job_id, "completed", attempt_id=self.attempt_id, exit_code=0)
        assert resp.status_code == 200, resp.text
        self.worker.close()


def s3_serving(data_dir: Path, endpoint: str) -> Iterator[ServerProcess]:
    """An orchestrator (SQLite) whose artifact store is a new bucket on `endpoint`."""
    bucket = new_bucket(endpoint, "fleet")
    env = {**os.environ, **s3_environment(endpoint)}
    proc = ServerProcess(
        data_dir, None, env=env, artifacts=f"s3://{bucket}/gpufleet", **{"heartbeat-timeout": 120}
    )
    proc.start()
    yield proc
    proc.kill(signal.SIGTERM)
