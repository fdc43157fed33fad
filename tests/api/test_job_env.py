"""A job's environment in its config (docs/jobs.md): `requirements`, `env_from`, `setup`
checked at submit (hostile values refused, nothing stored), and offered only to a worker that
says `env` in its features, the others' reasons saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import GPUFLEET_FEATURES, Fleet
from tests.api.test_workdirs import archive_of, digest, put

HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"requirements": "numpy\x00"}, "NUL"),
    ({"requirements": "\ud800"}, "not valid UTF-8"),
    ({"requirements": "x" * (64 * 1024 + 1)}, "over 65536 bytes"),
    ({"requirements": 42}, "non-empty string"),
    ({"requirements": "  "}, "non-empty string"),
    ({"setup": "echo \x00"}, "NUL"),
    ({"setup": ["echo"]}, "non-empty string"),
    ({"env_from": "pyproject.toml"}, "names no 'workdir'"),
    ({"env_from": "../x.txt", "workdir": "W"}, "relative path"),
    ({"env_from": "/etc/passwd.txt", "workdir": "W"}, "relative path"),
    ({"env_from": "setup.py", "workdir": "W"}, "relative path"),
    ({"env_from": "a\nb.txt", "workdir": "W"}, "relative path"),
    ({"env_from": "r.txt", "requirements": "x", "workdir": "W"}, "keep one"),
]


@pytest.mark.parametrize(("fields", "said"), HOSTILE)
async def test_a_hostile_environment_is_refused_and_nothing_is_stored(
    fleet: Fleet, tmp_path: Path, fields: dict[str, Any], said: str
) -> None:
    body = archive_of(tmp_path, {"r.txt": "x\n"})
    assert (await put(fleet.admin, body)).status_code in (200, 201)
    if fields.get("workdir") == "W":
        fields = {**fields, "workdir": digest(body)}
    answer = await fleet.admin.post(  # JSON's escapes, so that a lone surrogate can be sent
        "/api/queue/submit",
        content=json.dumps({"config": {"command": ["python", "x.py"], **fields}}),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"]
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0


async def test_a_job_with_requirements_waits_for_a_worker_that_builds_environments(
    fleet: Fleet,
) -> None:
    older = await fleet.create_worker("older")
    await older.connect(gpu_count=1, features=[*GPUFLEET_FEATURES, "workdir"])
    job = await fleet.submit(
        config={"command": ["python", "-c", "import numpy"], "requirements": "numpy\n"}
    )
    assert job["status"] == "queued"
    waiting = (await fleet.job(job["id"]))["waiting"]
    assert "builds an environment" in str(waiting)
    assert "does not say `env` in its features" in str(waiting["workers"])

    current = await fleet.create_worker("current")
    await current.connect(gpu_count=1, features=[*GPUFLEET_FEATURES, "workdir", "env"])
    offer = await current.next_offer()
    assert offer["job_id"] == job["id"]
    assert offer["config"]["requirements"] == "numpy\n"
