"""A multi-node (gang) job run by fake workers over the wire (tests/e2e, tests/browser): every
node acknowledges, gets its start, runs, prints lines as its own node, and ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.e2e.conftest import FakeWorker, ServerProcess, unique

GANG_FEATURES = ["command", "attempts", "gang"]
PORT = 29_500


@dataclass
class FakeGang:
    job_id: str
    nodes: list[FakeWorker]  # in rank order
    offers: list[dict[str, Any]]
    sent: list[int] = field(default_factory=list)  # lines each node sent

    def say(self, rank: int, *texts: str) -> None:
        """Node `rank` ships these lines of output, as its own node's."""
        body = {
            "attempt_id": self.offers[rank]["attempt_id"],
            "node_rank": rank,
            "first": self.sent[rank],
            "lines": [{"stream": "stdout", "text": text} for text in texts],
        }
        answer = self.nodes[rank].post(f"/api/workers/job/{self.job_id}/logs", body)
        assert answer.status_code == 200, answer.text
        self.sent[rank] += len(texts)

    def report(self, rank: int, status: str, **body: Any) -> None:
        answer = self.nodes[rank].report(
            self.job_id,
            status,
            attempt_id=self.offers[rank]["attempt_id"],
            node_rank=rank,
            **body,
        )
        assert answer.status_code == 200, answer.text

    def finish(self) -> None:
        """Every node completes, the others before rank 0 (whose end is the job's)."""
        for rank in reversed(range(len(self.nodes))):
            self.report(rank, "completed", exit_code=0)

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def running_gang(server: ServerProcess, nodes: int = 2) -> FakeGang:
    """A gang job of `nodes` fake workers (a pool of their own), started and running."""
    pool = {"pool": unique("gang")}
    workers = [FakeWorker(server, unique(f"node{n}"), labels=pool) for n in range(nodes)]
    for worker in workers:
        worker.register(features=GANG_FEATURES)
        worker.connect()
        worker.keep_alive()
    with server.admin() as admin:
        answer = admin.post(
            "/api/queue/submit",
            # first in the queue: only the first gang holds workers (docs/jobs.md)
            json={
                "config": {"command": ["true"], "nodes": nodes},
                "worker_labels": pool,
                "priority": 1000,
            },
        )
        assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    offered = []
    for worker in workers:
        assert worker.stream is not None
        offered.append((worker.stream.next("job_submit"), worker))
    offered.sort(key=lambda ow: int(ow[0]["node_rank"]))
    gang = FakeGang(job_id, [w for _, w in offered], [o for o, _ in offered], [0] * nodes)
    for rank in range(nodes):
        extra = {"port": PORT} if rank == 0 else {}
        gang.report(rank, "acknowledged", address="127.0.0.1", **extra)
    for node in gang.nodes:
        assert node.stream is not None
        node.stream.next("job_start")
    for rank in range(nodes):
        gang.report(rank, "running")
    return gang
