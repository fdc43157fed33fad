"""A gpufleet worker's writes into a job are bound to the attempt (#31.3): its worker token
alone, or with another attempt's token, writes nothing into another job, so a job that got
hold of its worker's token can act only on its own attempt. The SimpleTuner agent, which
sends no attempt token, keeps its wire (tests/api/test_simpletuner_dialect.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from tests.api.conftest import GPUFLEET_FEATURES, Agent, Fleet

BOUND_FEATURES = [*GPUFLEET_FEATURES, "attempt_token"]  # what `gpufleet worker` says
FAKE = b"extra weights from another job\n"


async def _bound_worker(fleet: Fleet) -> Agent:
    agent = await fleet.create_worker("bound-1", worker_type="persistent")
    return await agent.connect(features=BOUND_FEATURES, gpu_count=1, gpu_name="Test GPU")


async def _post(
    fleet: Fleet, agent: Agent, path: str, body: dict[str, Any], token: str | None
) -> httpx.Response:
    headers = {**agent.headers, **({"X-Attempt-Token": token} if token else {})}
    return await fleet.http.post(path, json=body, headers=headers)


async def _report(
    fleet: Fleet, agent: Agent, offer: dict[str, Any], status: str, **body: Any
) -> None:
    answer = await _post(
        fleet,
        agent,
        f"/api/workers/job/{offer['job_id']}/status",
        {"status": status, "attempt_id": offer["attempt_id"], **body},
        offer["upload_token"],
    )
    assert answer.status_code == 200, answer.text


async def _job_a_done_then_b_running(
    fleet: Fleet,
) -> tuple[Agent, dict[str, Any], dict[str, Any]]:
    """The worker ran job A (whose attempt token a thief holds), and now runs job B."""
    agent = await _bound_worker(fleet)
    await fleet.submit(gpu_count=1)
    offer_a = await agent.next_offer()
    for status in ("acknowledged", "running", "completed"):
        await _report(fleet, agent, offer_a, status)
    await fleet.submit(gpu_count=1)
    offer_b = await agent.next_offer()
    for status in ("acknowledged", "running"):
        await _report(fleet, agent, offer_b, status)
    assert offer_a["upload_token"] != offer_b["upload_token"]
    return agent, offer_a, offer_b


def _writes(offer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    job, attempt = offer["job_id"], offer["attempt_id"]
    return [
        (
            f"/api/workers/job/{job}/logs",
            {"attempt_id": attempt, "lines": [{"stream": "stdout", "text": "FAKE LINE"}]},
        ),
        (
            f"/api/workers/job/{job}/upload",
            {
                "attempt_id": attempt,
                "path": "output/extra-weights.bin",
                "size": len(FAKE),
                "sha256": hashlib.sha256(FAKE).hexdigest(),
            },
        ),
        (
            f"/api/workers/job/{job}/status",
            {"attempt_id": attempt, "status": "running", "progress": {"step": 999}},
        ),
        (f"/api/workers/job/{job}/status", {"attempt_id": attempt, "status": "failed"}),
        (
            f"/api/workers/job/{job}/checkpoints",
            {
                "attempt_id": attempt,
                "name": "fake",
                "path": "ckpt/fake",
                "step": 1,
                "files": [{"path": "ckpt/fake/w.bin", "size": 1, "sha256": "0" * 64}],
            },
        ),
    ]


async def test_another_attempts_token_or_none_writes_nothing_into_a_bound_workers_job(
    fleet: Fleet,
) -> None:
    agent, offer_a, offer_b = await _job_a_done_then_b_running(fleet)

    for stolen in (offer_a["upload_token"], None, "ut_" + "A" * 43):
        for path, body in _writes(offer_b):
            answer = await _post(fleet, agent, path, body, stolen)
            assert answer.status_code == 403, (path, stolen, answer.text)
            assert "attempt" in answer.json()["detail"]

    # Nor does it read the job's checkpoints (a resume's fetch and download).
    for path in ("checkpoints/k_x", "artifacts/r_x"):
        read = await fleet.http.get(
            f"/api/workers/job/{offer_b['job_id']}/{path}",
            params={"attempt_id": offer_b["attempt_id"]},
            headers={**agent.headers, "X-Attempt-Token": offer_a["upload_token"]},
        )
        assert read.status_code == 403, (path, read.text)

    job_b = await fleet.job(offer_b["job_id"])
    assert job_b["status"] == "running" and (job_b["progress"] or {}).get("step") != 999
    logs = (await fleet.admin.get(f"/api/queue/{offer_b['job_id']}/logs")).json()
    assert not [line for line in logs["lines"] if line["text"] == "FAKE LINE"]
    files = (await fleet.admin.get(f"/api/queue/{offer_b['job_id']}/artifacts")).json()
    assert not [f for f in files["artifacts"] if f["path"] == "output/extra-weights.bin"]


async def test_the_attempts_own_token_writes_its_logs_and_files(fleet: Fleet) -> None:
    agent, _offer_a, offer_b = await _job_a_done_then_b_running(fleet)
    token = offer_b["upload_token"]
    logs_path, logs_body = _writes(offer_b)[0]
    upload_path, upload_body = _writes(offer_b)[1]

    assert (await _post(fleet, agent, logs_path, logs_body, token)).status_code == 200
    plan = await _post(fleet, agent, upload_path, upload_body, token)
    assert plan.status_code == 200, plan.text
    url = plan.json()["url"]
    put = {**agent.headers, "Content-Type": "application/octet-stream"}
    # The bytes, too, are the attempt's: another attempt's token cannot send them.
    stolen = await fleet.http.put(url, content=FAKE, headers=put)
    assert stolen.status_code == 403, stolen.text
    sent = await fleet.http.put(url, content=FAKE, headers={**put, "X-Attempt-Token": token})
    assert sent.status_code == 201, sent.text

    logs = (await fleet.admin.get(f"/api/queue/{offer_b['job_id']}/logs")).json()
    assert [line["text"] for line in logs["lines"]] == ["FAKE LINE"]
    files = (await fleet.admin.get(f"/api/queue/{offer_b['job_id']}/artifacts")).json()
    assert [f["path"] for f in files["artifacts"]] == ["output/extra-weights.bin"]


async def test_a_bound_worker_cannot_register_again_as_an_agent_that_sends_no_attempt_token(
    fleet: Fleet,
) -> None:
    agent, _offer_a, offer_b = await _job_a_done_then_b_running(fleet)

    downgrade = await agent.register(
        features=GPUFLEET_FEATURES, current_job_id=offer_b["job_id"], gpu_count=1
    )
    assert downgrade.status_code == 403, downgrade.text
    assert "rotate" in downgrade.json()["detail"]
    unbound = await _post(fleet, agent, *_writes(offer_b)[0], None)
    assert unbound.status_code == 403, unbound.text

    agent.token = await fleet.rotate_token(agent)  # the admin's way to change agents
    again = await agent.register(features=GPUFLEET_FEATURES, gpu_count=1)
    assert again.status_code == 200, again.text


async def test_a_bound_workers_job_secrets_are_handed_only_with_that_attempts_token(
    fleet: Fleet,
) -> None:
    """A job holding its worker's token (and its own attempt's) cannot read the secrets of
    another job running on that worker."""
    value = "hf_admins_own_0123456789SECRET"
    assert (await fleet.admin.put("/api/secrets/hf", json={"value": value})).status_code == 200
    agent = await _bound_worker(fleet)
    await fleet.submit(gpu_count=1)
    offer_a = await agent.next_offer()
    for status in ("acknowledged", "running", "completed"):
        await _report(fleet, agent, offer_a, status)
    config = {"command": ["python", "train.py"], "env": {"HF_TOKEN": {"secret": "hf"}}}
    await fleet.submit(gpu_count=1, config=config)
    offer_b = await agent.next_offer()
    await _report(fleet, agent, offer_b, "acknowledged")
    path = f"/api/workers/job/{offer_b['job_id']}/secrets"
    params = {"attempt_id": offer_b["attempt_id"]}

    for stolen in (offer_a["upload_token"], None):
        headers = {**agent.headers, **({"X-Attempt-Token": stolen} if stolen else {})}
        refused = await fleet.http.get(path, params=params, headers=headers)
        assert refused.status_code == 403, refused.text
        assert value not in refused.text

    headers = {**agent.headers, "X-Attempt-Token": offer_b["upload_token"]}
    handed = await fleet.http.get(path, params=params, headers=headers)
    assert handed.status_code == 200, handed.text
    assert handed.json()["env"] == {"HF_TOKEN": value}
