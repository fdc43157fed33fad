"""The model comes home from a SimpleTuner job: the released agent runs the trainer (our
stand-in, which publishes with the released trainer's own `PublishingManager` and boto3),
the orchestrator stores what it PUTs, and the files download from the API byte for byte.
Real processes: `gpufleet server`, `python -m simpletuner.worker_agent`, the trainer.

On SQLite only: what the processes add is backend-free, and the same publisher's PUTs are
stored and read back on both backends in tests/api/test_simpletuner_storage.py."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.api.served import extract_publishing
from tests.e2e.conftest import ServerProcess, wait_job
from tests.e2e.test_simpletuner_agent import (
    AGENT_SERVER_FLAGS,
    ReleasedAgent,
    database_url,
    lane,
    released_agent,
    submit,
)

__all__ = ["database_url", "released_agent"]  # fixtures, used by name
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str | None
) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("orchestrator"), database_url, **AGENT_SERVER_FLAGS
    )
    proc.start()
    yield proc
    proc.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def publishing_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_publishing(tmp_path_factory.mktemp("publishing"))


@pytest.fixture
def publishing_agent(
    released_agent: Path, publishing_code: Path, tmp_path: Path
) -> Iterator[Callable[[ServerProcess], ReleasedAgent]]:
    made: list[ReleasedAgent] = []

    def make(server: ServerProcess) -> ReleasedAgent:
        agent = ReleasedAgent(server, released_agent, tmp_path, persistent=True)
        env = dict(agent.env or os.environ)
        env["PYTHONPATH"] = f"{env.get('PYTHONPATH', '')}{os.pathsep}{publishing_code}"
        agent.env = env
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.stop()


def test_a_simpletuner_jobs_outputs_come_home_through_the_trainers_own_publisher(
    server: ServerProcess,
    publishing_agent: Callable[[ServerProcess], ReleasedAgent],
    tmp_path: Path,
) -> None:
    agent = publishing_agent(server).start()
    digests_file = tmp_path / "sha256.json"
    outputs = {"pytorch_lora_weights.safetensors": 9 * MiB + 3, "logs/train.txt": 1000}
    config = {
        "stub_steps": 2,
        "output_dir": str(tmp_path / "run" / "models"),
        "stub_outputs": outputs,
        "stub_outputs_sha256": str(digests_file),
    }
    job_id = submit(server, config, lane(agent))
    job = wait_job(server, job_id, "completed", "failed", timeout=60)
    assert job["status"] == "completed", (job, agent.log())
    digests = json.loads(digests_file.read_text())
    with server.admin() as admin:
        listed = admin.get(f"/api/queue/{job_id}/artifacts").json()
        stored = {a["path"]: a for a in listed["artifacts"]}
        assert set(stored) == {f"output/models/{rel}" for rel in outputs}
        for rel, size in outputs.items():
            art = stored[f"output/models/{rel}"]
            assert (art["size"], art["sha256"]) == (size, digests[rel])
            got = admin.get(f"/api/queue/{job_id}/artifacts/output/models/{rel}")
            assert got.status_code == 200 and got.headers["x-gpufleet-sha256"] == digests[rel]
            assert len(got.content) == size
    (tmp_path / "run").rename(tmp_path / "gone")  # the worker's folder is gone: still there
    with server.admin() as admin:
        again = admin.get(f"/api/queue/{job_id}/artifacts/output/models/logs/train.txt")
    assert again.status_code == 200 and len(again.content) == 1000
