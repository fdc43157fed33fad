"""A job on a scripted worker whose files reach the orchestrator through a real upload route
(for the CLI's and the browser's tests of #17; no worker process)."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import httpx

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
        offer = stream.next("job_submit")
        self.server = server
        self.attempt_id: str = offer["attempt_id"]
        self.upload_token: str = offer["upload_token"]
        for status in ("acknowledged", "running"):
            resp = self.worker.report(self.job_id, status, attempt_id=self.attempt_id)
            assert resp.status_code == 200, resp.text

    def upload(self, path: str, data: bytes) -> None:
        """Store `data` at `path` (under `output/`) through the storage route a SimpleTuner
        trainer publishes to, with the attempt's upload token from the offer."""
        rest = path.removeprefix("output/")
        assert rest != path, "this route stores files under output/ only"
        url = f"/api/cloud/storage/gpufleet/{self.job_id}/{quote(rest)}"
        with httpx.Client(base_url=self.server.url, timeout=30) as c:
            resp = c.put(url, content=data, headers={"X-Upload-Token": self.upload_token})
        assert resp.status_code == 200, resp.text

    def finish(self) -> None:
        resp = self.worker.report(self.job_id, "completed", attempt_id=self.attempt_id, exit_code=0)
        assert resp.status_code == 200, resp.text
        self.worker.close()
