"""The attack of #31's finding 2, against a real `gpufleet server` and `gpufleet worker`: a
viewer overwrites admin's stored `prod-train` with their own command, and admin's next job
from it runs the viewer's code with admin's priority. Now the viewer's write is refused, and
the job runs admin's command, recording the version it ran and who wrote it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.commands import gf, in_own_terms
from tests.e2e.conftest import (
    Member,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    unique,
    wait_job,
)

ADMINS = {"command": [sys.executable, "-c", "print('admin trains prod')"]}
VERAS = {"command": ["sh", "-c", "echo PWNED; id"]}


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("configs"), None)
    server.start()
    yield server
    server.kill(signal.SIGTERM)


def test_a_viewer_cannot_overwrite_admins_config_and_admins_job_runs_admins_command(
    orchestrator: ServerProcess, agents: Callable[..., WorkerProcess]
) -> None:
    name = unique("prod-train")
    vera = Member(orchestrator, "nlp", "viewer")
    with orchestrator.admin() as admin:
        stored = admin.put(f"/api/configs/{name}", json=ADMINS)
        assert stored.status_code == 200, stored.text

    with vera.client() as client:
        overwrite = client.put(f"/api/configs/{name}", json=VERAS)
        delete = client.delete(f"/api/configs/{name}")
    assert overwrite.status_code == 403, overwrite.text
    assert "belongs to admin" in overwrite.json()["detail"]
    assert delete.status_code == 403, delete.text

    tag = {"pool": unique("p")}
    agent = agents(orchestrator, labels=tag).start()
    with orchestrator.admin() as admin:
        config = admin.get(f"/api/configs/{name}").json()
        submitted = admin.post(
            "/api/queue/submit",
            json={"config_name": name, "target": "worker", "worker_labels": tag},
        )
    assert config["config"] == ADMINS and config["version"] == 1
    assert submitted.status_code == 201, submitted.text
    job = wait_job(orchestrator, submitted.json()["id"], "completed", "failed")

    assert job["status"] == "completed" and job["worker_id"] == agent.id
    lines = job_log_lines(orchestrator, job["id"])
    assert lines == ["admin trains prod"]
    assert not any("PWNED" in line for line in lines)
    assert job["config"] == ADMINS and job["config_version"] == 1
    assert job["config_written_by"] == "admin" and job["config_digest"] == config["digest"]
    shown = _gpufleet(orchestrator, orchestrator.admin_key, "jobs", "show", job["id"]).stdout
    assert f"{name} v1 (sha256 {config['digest'][:8]}…) written by admin" in shown


def _gpufleet(server: ServerProcess, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    return gf(server, *args, key=key)


def test_the_cli_shares_lists_versions_and_refuses_in_its_own_terms(
    orchestrator: ServerProcess, tmp_path: Path
) -> None:
    lead = Member(orchestrator, "nlp", "lead")
    name = unique("teamcfg")
    path = tmp_path / "train.json"
    path.write_text(json.dumps(ADMINS))
    admin = orchestrator.admin_key
    stored = _gpufleet(orchestrator, admin, "configs", "put", str(path), "--name", name)
    assert stored.returncode == 0 and f"Stored config {name} v1 (owner admin)" in stored.stdout

    refused = _gpufleet(orchestrator, lead.key, "configs", "put", str(path), "--name", name)
    assert refused.returncode != 0
    error = refused.stderr.strip()
    assert "belongs to admin" in error and "gpufleet configs put FILE --name" in error
    in_own_terms(error)

    shared = _gpufleet(
        orchestrator, admin, "configs", "put", str(path), "--name", name, "--team", lead.team
    )
    assert f"shared with team {lead.team}" in shared.stdout, shared.stderr
    by_lead = _gpufleet(orchestrator, lead.key, "configs", "put", str(path), "--name", name)
    assert by_lead.returncode == 0 and f"{name} v3" in by_lead.stdout, by_lead.stderr

    listed = _gpufleet(orchestrator, lead.key, "configs", "list").stdout
    row = next(line for line in listed.splitlines() if name in line)
    assert "admin" in row and lead.team in row and "v3" in row
    versions = _gpufleet(orchestrator, lead.key, "configs", "versions", name).stdout
    lines = [line for line in versions.splitlines() if line.strip().startswith("v")]
    assert [line.split()[0] for line in lines] == ["v3", "v2", "v1"]
    assert lead.name in lines[0] and "admin" in lines[2]
    old = _gpufleet(orchestrator, lead.key, "configs", "show", name, "--version", "1")
    assert json.loads(old.stdout) == ADMINS
