"""Who may act on a job (#31, finding 1 as reported), with a real `gpufleet server` and a real
`gpufleet worker`: a viewer's key cancels another team's running job, one by one, in bulk and
with `gpufleet jobs cancel`: refused, and the job keeps running on its worker; the owner's
cancel still stops it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.commands import gf, in_own_terms, one_line_error
from tests.e2e.conftest import (
    Member,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    serving,
    unique,
    wait_job,
)
from tests.e2e.test_sharing import gpu_env
from tests.waiting import wait_until

__all__ = ["gpu_env"]  # a fixture used by name

# Prints a numbered line ten times a second until stopped.
TICKING = [
    sys.executable,
    "-u",
    "-c",
    "import itertools, time\nfor n in itertools.count():\n    print(f'tick {n}')\n"
    "    time.sleep(0.1)",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("ownership"), None)


def ticks(server: ServerProcess, job_id: str) -> int:
    return sum(line.startswith("tick ") for line in job_log_lines(server, job_id))


def test_a_viewer_cannot_cancel_another_teams_running_job_and_it_keeps_running(
    server: ServerProcess,
    agents: Callable[..., WorkerProcess],
    gpu_env: dict[str, str],
) -> None:
    labels = {"pool": unique("own")}
    worker = agents(server, labels=labels, env=gpu_env, persistent=True).start()
    bob = Member(server, "vision", "researcher")
    vera = Member(server, "nlp", "viewer")
    job = bob.submit(labels, TICKING)
    wait_job(server, job["id"], "running")
    wait_until(lambda: ticks(server, job["id"]) > 0, timeout=15, message="bob's job to print")

    with vera.client() as c:
        one = c.post(f"/api/queue/{job['id']}/cancel")
        bulk = c.post("/api/queue/cancel", json={"job_ids": [job["id"]]})

    assert one.status_code == 403, one.text
    assert "only its owner, a lead of its team or an admin" in one.json()["detail"]
    assert bulk.status_code == 200, bulk.text
    [result] = bulk.json()["results"]
    assert result["ok"] is False and "only its owner" in result["error"], result
    said = one_line_error(gf(server, "jobs", "cancel", job["id"], key=vera.key))  # in its terms
    assert f"ask one of them to run `gpufleet jobs cancel {job['id']}`" in said, said
    in_own_terms(said)
    # Still running: it goes on printing after both refusals.
    seen = ticks(server, job["id"])
    wait_until(
        lambda: ticks(server, job["id"]) > seen + 2,
        timeout=15,
        message="bob's job to go on printing",
    )
    running: dict[str, Any] = wait_job(server, job["id"], "running")
    assert running["attempt_history"][-1]["status"] == "running"
    assert worker.record()["current_job_id"] == job["id"]

    with bob.client() as c:
        own = c.post(f"/api/queue/{job['id']}/cancel")
    assert own.status_code == 200, own.text
    done = wait_job(server, job["id"], "cancelled")
    assert done["attempt_history"][-1]["status"] == "cancelled"
