"""A job whose scripted worker uploads files the way docs/artifacts.md's worker API says (for
the CLI's and the browser's tests of #17: the real upload routes, no worker process)."""

from __future__ import annotations

import hashlib
from typing import Any

from tests.e2e.conftest import FakeWorker, ServerProcess, submit_job, unique


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Attempt:
    """A job running on a scripted worker that uploads files as docs/artifacts.md says."""

    def __init__(self, server: ServerProcess) -> None:
        tag = {"pool": unique("art")}
        self.worker = FakeWorker(server, unique("art"), labels=tag)
        self.worker.register(labels=tag)
        stream = self.worker.connect()
        self.job_id = submit_job(server, tag, ["true"])
        self.attempt_id: str = stream.next("job_submit")["attempt_id"]
        for status in ("acknowledged", "running"):
            resp = self.worker.report(self.job_id, status, attempt_id=self.attempt_id)
            assert resp.status_code == 200, resp.text

    def upload(self, path: str, data: bytes, checkpoint: str | None = None) -> dict[str, Any]:
        announce = {
            "attempt_id": self.attempt_id,
            "path": path,
            "size": len(data),
            "sha256": sha(data),
            "kind": "checkpoint" if checkpoint else "artifact",
            "checkpoint": checkpoint,
        }
        with self.worker.http() as c:
            resp = c.post(f"/api/workers/job/{self.job_id}/upload", json=announce)
            assert resp.status_code == 200, resp.text
            offer = resp.json()
            assert offer["via"] == "orchestrator", offer  # the data-folder store streams
            resp = c.put(offer["url"], content=data, headers=offer["headers"])
            assert resp.status_code == 201, resp.text
            return dict(resp.json())

    def commit(self, name: str, files: dict[str, bytes], step: int) -> None:
        body = {
            "attempt_id": self.attempt_id,
            "name": name,
            "path": f"output/{name}",
            "step": step,
            "files": [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in files.items()],
        }
        resp = self.worker.post(f"/api/workers/job/{self.job_id}/checkpoints", body)
        assert resp.status_code == 201, resp.text

    def finish(self) -> None:
        resp = self.worker.report(self.job_id, "completed", attempt_id=self.attempt_id, exit_code=0)
        assert resp.status_code == 200, resp.text
        self.worker.close()
