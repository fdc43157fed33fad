"""A two-node job's checkpoints through two real `gpufleet worker`s (#35, docs/artifacts.md):
both nodes of `train.py --ddp` store their part of each checkpoint; node 1's worker is killed
with its job, the job is requeued and resumes, on the survivor and a spare, from the newest
checkpoint both nodes completed, each node getting its own part; it ends with the weights of
an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    ServerProcess,
    WorkerProcess,
    serving,
    submit_job,
    unique,
    wait_job,
)
from tests.e2e.test_artifacts_resume import kill_with_its_job, paced_until_resumed
from tests.torch_check import needs_torch
from tests.waiting import wait_until

needs_torch()

Agents = Callable[..., WorkerProcess]
# 40 steps of 0.15 s (tests/chaos/test_gang_faults.py's pace): the first checkpoint both
# nodes complete (step 10) leaves 4.5 s to kill node 1 before the job could end; the resumed
# attempt runs what is left at full speed.
MODEL = ["--samples", "60", "--steps", "40", "--seed", "4", "--min-accuracy", "0.5"]
TRAIN = paced_until_resumed(
    [sys.executable, "-m", "gpufleet.examples.train", *MODEL, "--ddp", "--checkpoint-every", "10"],
    "0.15",
)
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Node 1's worker is found lost 1 s after its last heartbeat, not 3 (its beats come every
    # 0.5 s; a worker whose stream is open is never lost): the requeue waits 2 s less.
    yield from serving(tmp_path_factory.mktemp("orchestrator"), **{"heartbeat-timeout": 1})


def checkpoints(server: ServerProcess, job_id: str) -> list[dict[str, Any]]:
    with server.admin() as admin:
        answer = admin.get(f"/api/queue/{job_id}/artifacts")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["checkpoints"]
    return found


def uninterrupted(folder: Path, model: Sequence[str] = MODEL) -> str:
    """The weights checksum of one process on the same global batch (what DDP ends with), on
    NumPy: its float64 weights round to the ranks' float32 checksum as a PyTorch run's do,
    without PyTorch's import (1.7 CPU-s)."""
    argv = [sys.executable, "-m", "gpufleet.examples.train", *model, "--backend", "numpy"]
    subprocess.run(argv, cwd=folder, env={**os.environ, **ENV}, check=True, timeout=120)
    checksum: str = json.loads((folder / "result.json").read_text())["weights_sha256"]
    return checksum


def test_a_requeued_gang_resumes_every_node_from_its_own_part_of_a_complete_checkpoint(
    orchestrator: ServerProcess, agents: Agents, tmp_path: Path
) -> None:
    tag = {"pool": unique("gang-resume")}
    workers = [agents(orchestrator, labels=tag, persistent=True).start() for _ in range(2)]
    config = {"nodes": 2, "max_retries": 2, "env": ENV}
    job_id = submit_job(orchestrator, tag, TRAIN, config=config)

    def complete() -> list[dict[str, Any]]:
        return [c for c in checkpoints(orchestrator, job_id) if c["nodes"]["complete"]]

    wait_until(lambda: complete(), timeout=90, message="a checkpoint every node completed")
    first = wait_job(orchestrator, job_id, "running")
    rank0 = first["worker_id"]
    node1 = next(w for w in workers if w.id != rank0)
    kill_with_its_job(node1)  # its machine is gone, the job's process with it
    spare = agents(orchestrator, labels=tag, persistent=True).start()

    job = wait_job(orchestrator, job_id, "completed", "failed", timeout=180)
    assert job["status"] == "completed", (job["error"], job["attempt_history"])
    first_try, last = job["attempt_history"][0], job["attempt_history"][-1]
    assert first_try["status"] == "lost", job["attempt_history"]
    resumed = last["resumed_from"]
    assert resumed is not None and resumed["attempt_number"] == 1, last
    listed = {c["name"]: c for c in checkpoints(orchestrator, job_id)}
    assert listed[resumed["checkpoint"]]["nodes"]["complete"]

    # Each node of the new attempt got its own part of it, where the job had written it.
    survivor = next(w for w in workers if w.id == rank0)
    held = []
    for node in (survivor, spare):
        part = node.work_dir / "jobs" / job_id / last["id"] / "output" / resumed["checkpoint"]
        assert part.is_dir(), f"{node.id} holds no {part}"
        held.append(sorted(p.name for p in part.iterdir()))
    assert sorted(held) == [["rank-0"], ["rank-1"]]

    rank0_now = next(w for w in (survivor, spare) if w.id == job["worker_id"])
    result = json.loads(
        (rank0_now.work_dir / "jobs" / job_id / last["id"] / "result.json").read_text()
    )
    assert result["world_size"] == 2
    assert result["weights_sha256"] == uninterrupted(tmp_path)
