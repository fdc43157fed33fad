"""What the Python client answers: frozen records read from the API's JSON (docs/api.md).

Each keeps the answer it was read from (`raw`) for the fields it does not name. A `Job` is
also a handle: `job.wait()`, `job.logs(follow=True)`, `job.download(dir)`, `job.cancel()`
call the client that read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.domain.states import TERMINAL_JOB, JobStatus

if TYPE_CHECKING:
    from gpufleet.client.client import Client
    from gpufleet.client.transfer import Saved


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the orchestrator last answered it."""

    id: str
    status: JobStatus
    target: str
    gpu_count: int
    nodes: int
    attempts: int
    exit_code: int | None
    error: str | None
    worker_id: str | None
    worker_name: str | None
    user: str | None
    team: str | None
    created_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    progress: Mapping[str, Any] | None
    idempotent_hit: bool  # a submit's answer: its key named this job, made before
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    client: Client = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any], client: Client) -> Job:
        return cls(
            id=str(body["id"]),
            status=JobStatus(body["status"]),
            target=str(body["target"]),
            gpu_count=int(body.get("gpu_count") or 0),
            nodes=int(body.get("nodes") or 1),
            attempts=int(body.get("attempts") or 0),
            exit_code=body.get("exit_code"),
            error=body.get("error"),
            worker_id=body.get("worker_id"),
            worker_name=body.get("worker_name"),
            user=body.get("user"),
            team=body.get("team"),
            created_at=_when(body.get("created_at")),
            started_at=_when(body.get("started_at")),
            ended_at=_when(body.get("ended_at")),
            progress=body.get("progress"),
            idempotent_hit=bool(body.get("idempotent_hit", False)),
            raw=body,
            client=client,
        )

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_JOB

    @property
    def completed(self) -> bool:
        return self.status is JobStatus.COMPLETED

    def refresh(self) -> Job:
        return self.client.job(self.id)

    def wait(self, timeout: float | None = None) -> Job:
        """The job once it ended (completed, failed or cancelled); `TimeoutError` after
        `timeout` seconds."""
        return self.client.wait(self.id, timeout=timeout)

    def logs(self, *, follow: bool = False, after: int = 0, node: int | None = None) -> Logs:
        return self.client.logs(self.id, follow=follow, after=after, node=node)

    def download(
        self, directory: Path | str, *paths: str, checkpoints: bool = False
    ) -> list[Saved]:
        return self.client.download(self.id, directory, *paths, checkpoints=checkpoints)

    def cancel(self) -> Job:
        return self.client.cancel(self.id)


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int
    text: str
    stream: str
    node: int
    attempt_id: str
    ts: datetime | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> LogLine:
        return cls(
            seq=int(body["seq"]),
            text=str(body["text"]),
            stream=str(body.get("stream", "stdout")),
            node=int(body.get("node") or 0),
            attempt_id=str(body.get("attempt_id", "")),
            ts=_when(body.get("ts")),
            raw=body,
        )


class Logs:
    """A job's log lines, read as they are iterated; followed, until the job ends, which
    then says how (`status`)."""

    def __init__(self, lines: Iterator[LogLine | JobStatus]) -> None:
        self._lines = lines
        self.status: JobStatus | None = None

    def __iter__(self) -> Iterator[LogLine]:
        for item in self._lines:
            if isinstance(item, JobStatus):
                self.status = item
                return
            yield item
