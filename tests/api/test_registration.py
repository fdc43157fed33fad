"""Workers register with either capability shape; admin choices survive registration."""

from __future__ import annotations

from tests.api.conftest import Fleet

DOCUMENTED = {
    "name": "gpu-worker-1",
    "persistent": True,
    "gpu_count": 2,
    "gpu_name": "NVIDIA A100-SXM4-80GB",
    "gpu_vram_gb": 80,
    "accelerator_type": "cuda",
    "gpus": [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_gb": 80.0, "uuid": "GPU-0"},
        {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "memory_gb": 80.0, "uuid": "GPU-1"},
    ],
    "driver_version": "550.54",
    "cuda_version": "12.4",
    "cpu_cores": 32,
    "ram_gb": 251.5,
    "labels": {"zone": "a"},
    "current_job_id": None,
    "current_attempt_id": None,
    "agent": "gpufleet/0.1.0",
}

SIMPLETUNER = {
    "name": "rtx-box",
    "gpu_info": {
        "name": "NVIDIA GeForce RTX 4090",
        "vram_gb": 24.0,
        "count": 1,
        "driver": "535.104",
        "accelerator": "cuda",
    },
    "persistent": False,
    "current_job_id": None,
}


async def test_registering_with_the_documented_shape_records_the_gpus(fleet: Fleet) -> None:
    agent = await fleet.create_worker("gpu-worker-1")

    answer = await agent.register(**DOCUMENTED)

    assert answer.status_code == 200
    body = answer.json()
    assert body["worker_id"] == agent.id
    assert body["status"] == "connecting"
    assert body["labels"] == {"zone": "a"}
    assert body["heartbeat_interval"] == 30
    assert body["resume_job"] is None
    assert body["abandon_job"] is False
    worker = await agent.info()
    assert worker["gpu_count"] == 2
    assert worker["gpu_name"] == "NVIDIA A100-SXM4-80GB"
    assert worker["gpu_vram_gb"] == 80
    assert worker["accelerator_type"] == "cuda"
    assert worker["worker_type"] == "persistent"
    assert worker["last_heartbeat"] is not None
    assert worker["capabilities"]["driver_version"] == "550.54"
    assert worker["capabilities"]["cpu_cores"] == 32
    assert len(worker["capabilities"]["gpus"]) == 2


async def test_registering_with_the_simpletuner_shape_records_the_gpus(fleet: Fleet) -> None:
    agent = await fleet.create_worker("rtx-box")

    answer = await agent.register(**SIMPLETUNER)

    assert answer.status_code == 200
    assert answer.json()["worker_id"] == agent.id
    assert answer.json()["abandon_job"] is False
    worker = await agent.info()
    assert worker["gpu_count"] == 1
    assert worker["gpu_name"] == "NVIDIA GeForce RTX 4090"
    assert worker["gpu_vram_gb"] == 24.0
    assert worker["accelerator_type"] == "cuda"
    assert worker["worker_type"] == "ephemeral"
    assert worker["capabilities"]["driver_version"] == "535.104"


async def test_a_worker_without_gpus_registers_as_cpu(fleet: Fleet) -> None:
    agent = await fleet.create_worker("laptop")

    answer = await agent.register(name="laptop")

    assert answer.status_code == 200
    worker = await agent.info()
    assert worker["gpu_count"] == 0
    assert worker["accelerator_type"] == "cpu"


async def test_registration_never_overwrites_the_admins_name_labels_or_type(fleet: Fleet) -> None:
    agent = await fleet.create_worker(
        "admin-name", labels={"team": "nlp"}, worker_type="persistent"
    )

    for _ in range(2):
        answer = await agent.register(
            name="some-hostname", persistent=False, labels={"team": "cv", "zone": "b"}
        )
        assert answer.status_code == 200

    assert answer.json()["name"] == "admin-name"
    worker = await agent.info()
    assert worker["name"] == "admin-name"
    assert worker["worker_type"] == "persistent"
    assert worker["labels"] == {"team": "nlp", "zone": "b"}
    assert worker["admin_labels"] == {"team": "nlp"}
    assert worker["capabilities"]["reported_name"] == "some-hostname"


async def test_a_worker_whose_type_the_admin_left_open_takes_the_reported_one(
    fleet: Fleet,
) -> None:
    agent = await fleet.create_worker("unset")

    await agent.register(persistent=True)

    assert (await agent.info())["worker_type"] == "persistent"


async def test_opening_the_stream_makes_a_registered_worker_idle(fleet: Fleet) -> None:
    agent = await fleet.create_worker("gpu-1")
    await agent.register(gpu_count=1)
    assert (await agent.info())["status"] == "connecting"

    stream = await agent.open_stream()

    assert stream.status == 200
    assert (await agent.info())["status"] == "idle"


async def test_a_bad_label_key_from_a_worker_is_refused(fleet: Fleet) -> None:
    agent = await fleet.create_worker("gpu-1")

    answer = await agent.register(labels={"-bad key": "x"})

    assert answer.status_code == 422
    assert "label key" in answer.json()["detail"]
    assert (await agent.info())["registered"] is False
