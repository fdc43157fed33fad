"""Long job logs put in fast: a scripted worker runs a job and ships its lines through the
worker log API, 1,000 a request (the most one request takes), as a real agent does."""

from __future__ import annotations

from dataclasses import dataclass

from tests.e2e.conftest import FakeWorker, ServerProcess, submit_job, unique

BATCH = 1000


def line_text(i: int) -> str:
    """Line i of a training log, about 90 characters."""
    return f"{i:07d} step={i} loss={1 / (i + 1):.6f} lr=0.000300 grad_norm=1.2345 " + "x" * 24


@dataclass
class RunningJob:
    job_id: str
    worker: FakeWorker
    attempt_id: str
    shipped: int = 0

    def ship(self, count: int, stream: str = "stdout") -> None:
        """The next `count` lines of the log, in batches."""
        with self.worker.http() as c:
            for start in range(self.shipped, self.shipped + count, BATCH):
                stop = min(start + BATCH, self.shipped + count)
                lines = [{"stream": stream, "text": line_text(i)} for i in range(start, stop)]
                resp = c.post(
                    f"/api/workers/job/{self.job_id}/logs",
                    json={"attempt_id": self.attempt_id, "lines": lines},
                )
                assert resp.status_code == 200, resp.text
        self.shipped += count

    def finish(self, status: str = "completed") -> None:
        exit_code = 0 if status == "completed" else 1
        resp = self.worker.report(
            self.job_id, status, attempt_id=self.attempt_id, exit_code=exit_code
        )
        assert resp.status_code == 200, resp.text


def running_job(server: ServerProcess, name: str = "logs") -> RunningJob:
    """A job running on a heartbeating scripted worker of its own."""
    tag = {"pool": unique(name)}
    worker = FakeWorker(server, unique(name), labels=tag)
    worker.register(labels=tag)
    stream = worker.connect()
    worker.keep_alive()
    job_id = submit_job(server, tag, ["true"])
    attempt = stream.next("job_submit")["attempt_id"]
    for status in ("acknowledged", "running"):
        resp = worker.report(job_id, status, attempt_id=attempt)
        assert resp.status_code == 200, resp.text
    return RunningJob(job_id, worker, attempt)
