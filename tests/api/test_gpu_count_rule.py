"""A submit's `gpu_count` is the config's own GPU count (`gpu_count`, SimpleTuner's
`num_processes` or `--num_processes`) when the config states one: a job never holds fewer
GPUs than its trainer starts processes, so no approval rule and no matching is sidestepped.
Refused with both numbers, on every way in; nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Fleet
from tests.api.test_policy import add_user, client_of, set_policy


async def nothing_queued(fleet: Fleet) -> None:
    assert (await fleet.admin.get("/api/queue")).json()["jobs"] == []
    assert await fleet.audit(type="job.submitted") == []


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"num_processes": 8, "model_type": "lora"}, "num_processes"),  # SimpleTuner's
        ({"--num_processes": 8, "model_type": "lora"}, "--num_processes"),  # its CLI form
        ({"command": ["python", "train.py"], "gpu_count": 8}, "gpu_count"),
    ],
)
@pytest.mark.parametrize("submitted", [0, 9])
async def test_a_gpu_count_other_than_the_configs_is_refused_naming_both(
    fleet: Fleet, config: dict[str, Any], field: str, submitted: int
) -> None:
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": config, "gpu_count": submitted}
    )

    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert f"gpu_count {submitted}" in detail and f"'{field}' (8)" in detail
    assert "gpu_count 8" in detail and "leave gpu_count out" in detail  # what to change
    await nothing_queued(fleet)


async def test_a_stored_config_is_held_to_its_own_gpu_count(fleet: Fleet) -> None:
    stored = await fleet.admin.put("/api/configs/big", json={"--num_processes": 8, "m": "flux"})
    assert stored.status_code == 200, stored.text

    refused = await fleet.admin.post(
        "/api/queue/submit", json={"config_name": "big", "gpu_count": 0, "target": "worker"}
    )
    assert refused.status_code == 422, refused.text
    assert "gpu_count 0" in refused.json()["detail"]
    await nothing_queued(fleet)

    taken = await fleet.admin.post("/api/queue/submit", json={"config_name": "big"})
    agreed = await fleet.admin.post(
        "/api/queue/submit", json={"config_name": "big", "gpu_count": 8}
    )
    assert taken.status_code == agreed.status_code == 201
    assert taken.json()["gpu_count"] == agreed.json()["gpu_count"] == 8


async def test_a_config_that_states_no_count_takes_the_submits(fleet: Fleet) -> None:
    job = await fleet.submit(config={"command": ["python", "train.py"]}, gpu_count=3)
    assert job["gpu_count"] == 3


async def test_a_config_whose_own_counts_disagree_is_neither_stored_nor_run(
    fleet: Fleet,
) -> None:
    config = {"gpu_count": 0, "num_processes": 8}

    stored = await fleet.admin.put("/api/configs/mixed", json=config)
    submitted = await fleet.admin.post("/api/queue/submit", json={"config": config})

    for answer in (stored, submitted):
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert "'gpu_count' (0)" in detail and "'num_processes' (8)" in detail
    assert (await fleet.admin.get("/api/configs/mixed")).status_code == 404
    await nothing_queued(fleet)


async def test_a_zero_gpu_count_cannot_sidestep_the_approval_rule(fleet: Fleet) -> None:
    await set_policy(fleet, approve_gpus_over=1, approve_levels=[])
    rita = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    config = {"num_processes": 8, "model_type": "lora"}

    sidestep = await rita.post("/api/queue/submit", json={"config": config, "gpu_count": 0})
    honest = await rita.post("/api/queue/submit", json={"config": config})

    assert sidestep.status_code == 422, sidestep.text
    assert honest.status_code == 201, honest.text
    assert honest.json()["status"] == "pending_approval"
    assert honest.json()["gpu_count"] == 8


async def test_a_zero_gpu_count_cannot_sidestep_the_matching(fleet: Fleet) -> None:
    small = await fleet.online_worker("one-gpu", gpu_count=1)
    config = {"num_processes": 8, "model_type": "lora"}

    refused = await fleet.admin.post("/api/queue/submit", json={"config": config, "gpu_count": 0})
    job = await fleet.submit(config=config)

    assert refused.status_code == 422
    assert (await fleet.job(job["id"]))["status"] == "queued"  # no 8-GPU worker yet
    assert small.stream is not None and await small.stream.collect() == []
