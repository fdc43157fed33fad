"""A job on a scripted worker whose files reach the orchestrator through a real upload route
(for the CLI's and the browser's tests of #17; no worker process).

Files go through `/api/cloud/storage` with the attempt's upload token, as a SimpleTuner trainer
sends them. Committing a checkpoint and resuming from one are the worker upload API's and the
dispatcher's (i17-server), not merged into this branch yet: until they are, `checkpoint` and
`resumed_from` write the rows those would write, in the orchestrator's SQLite file, after the
files went through the route (tests/api/artifact_world.py does the same in process).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import quote

import httpx
import sqlalchemy as sa

from gpufleet.store import tables
from tests.e2e.conftest import FakeWorker, ServerProcess, submit_job, unique


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Attempt:
    """A job running on a scripted worker that uploads files as docs/artifacts.md says."""

    def __init__(self, server: ServerProcess) -> None:
        tag = {"pool": unique("art")}
        self.server = server
        self.worker = FakeWorker(server, unique("art"), labels=tag)
        self.worker.register(labels=tag)
        self.stream = self.worker.connect()
        self.job_id = submit_job(server, tag, ["true"], retry_on=["failed", "lost"])
        self._take_offer()

    def _take_offer(self) -> None:
        offer = self.stream.next("job_submit")
        self.attempt_id: str = offer["attempt_id"]
        self.upload_token: str = offer["upload_token"]
        for status in ("acknowledged", "running"):
            resp = self.worker.report(self.job_id, status, attempt_id=self.attempt_id)
            assert resp.status_code == 200, resp.text

    def fail_and_retry(self) -> None:
        """The attempt fails; the job is retried on the same worker: a new live attempt."""
        resp = self.worker.report(
            self.job_id, "failed", attempt_id=self.attempt_id, exit_code=1, error="boom"
        )
        assert resp.status_code == 200, resp.text
        self._take_offer()

    def checkpoint(self, name: str, step: int, files: dict[str, bytes]) -> str:
        """The files uploaded under `output/<name>/`, then committed as a checkpoint; its id."""
        for rel, data in files.items():
            self.upload(f"output/{name}/{rel}", data)
        checkpoint_id = f"k_{secrets.token_hex(6)}"
        with self._database() as db:
            db.execute(
                tables.artifacts.update()
                .where(tables.artifacts.c.attempt_id == self.attempt_id)
                .where(tables.artifacts.c.path.startswith(f"output/{name}/"))
                .values(kind="checkpoint", checkpoint=name)
            )
            db.execute(
                tables.checkpoints.insert().values(
                    id=checkpoint_id,
                    job_id=self.job_id,
                    attempt_id=self.attempt_id,
                    name=name,
                    path=f"output/{name}",
                    step=step,
                    files=len(files),
                    size=sum(len(d) for d in files.values()),
                    created_at=datetime.now(UTC),
                )
            )
        return checkpoint_id

    def resumed_from(self, checkpoint_id: str) -> None:
        """The live attempt was offered `checkpoint_id` to resume from."""
        with self._database() as db:
            db.execute(
                tables.job_attempts.update()
                .where(tables.job_attempts.c.id == self.attempt_id)
                .values(resumed_from=checkpoint_id)
            )

    @contextlib.contextmanager
    def _database(self) -> Iterator[sa.Connection]:
        assert self.server.database_url is None, "rows are written to the SQLite file only"
        engine = sa.create_engine(f"sqlite:///{self.server.data_dir / 'gpufleet.db'}")
        try:
            with engine.begin() as db:
                yield db
        finally:
            engine.dispose()

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
