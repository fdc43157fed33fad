"""Resuming: the worker fetches the offered checkpoint into the new job folder, checks every
file, and tells the job where it is; anything wrong fails the attempt before it starts."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from gpufleet.worker.backoff import Backoff
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.errors import Fenced
from gpufleet.worker.job import Offer
from gpufleet.worker.resume import Resume, ResumeFailed, download_checkpoint
from gpufleet.worker.settings import AgentSettings
from gpufleet.worker.starting import prepare
from tests.artifact_fake import ArtifactFake


def leftovers(folder: Path) -> list[str]:
    return [name for _, _, names in os.walk(folder) for name in names if name.endswith(".part")]


WEIGHTS = bytes(range(256)) * 5000


def committed(fake: ArtifactFake, files: dict[str, bytes], *, attempt: str = "a_1") -> str:
    """A checkpoint stored and committed by attempt a_1; its id."""
    for path, data in files.items():
        fake.blobs[(attempt, path)] = data
    body = {
        "attempt_id": attempt,
        "name": "checkpoint-50",
        "path": "output/checkpoint-50",
        "step": 50,
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files.items()
        ],
    }
    fake.checkpoints["k_9"] = body
    return "k_9"


def client_for(fake: ArtifactFake) -> OrchestratorClient:
    settings = AgentSettings(orchestrator_url="http://orchestrator.test", worker_token="wt_test")
    return OrchestratorClient(settings, transport=httpx.MockTransport(fake.handle))


RESUME = Resume("k_9", "checkpoint-50", "output/checkpoint-50", 50)
FILES = {
    "output/checkpoint-50/weights.bin": WEIGHTS,
    "output/checkpoint-50/state.json": b'{"step": 50}',
}


@pytest.mark.parametrize("via", ["orchestrator", "store"])
async def test_every_file_lands_at_its_path_checked(tmp_path: Path, via: str) -> None:
    fake = ArtifactFake(via=via, live_attempt="a_2")
    committed(fake, FILES)
    client = client_for(fake)
    try:
        placed = await download_checkpoint(
            client,
            RESUME,
            job_id="j_1",
            attempt_id="a_2",
            folder=tmp_path,
            backoff=lambda: Backoff(0.001, 0.01),
        )
    finally:
        await client.aclose()
    assert {f.path for f in placed} == set(FILES)
    for path, data in FILES.items():
        assert (tmp_path / path).read_bytes() == data
    fetch = fake.requests[0]
    assert fetch.method == "GET"
    assert (
        fetch.url == "http://orchestrator.test/api/workers/job/j_1/checkpoints/k_9?attempt_id=a_2"
    )
    downloads = [r for r in fake.requests[1:]]
    if via == "store":
        assert all(r.token is None for r in downloads)  # presigned: the token stays home
    else:
        assert all(r.token == "wt_test" and "attempt_id=a_2" in r.url for r in downloads)
    assert not leftovers(tmp_path)


async def test_a_corrupt_file_fails_the_resume_naming_it_and_leaves_nothing(tmp_path: Path) -> None:
    fake = ArtifactFake(live_attempt="a_2", corrupt_download=True)
    committed(fake, {"output/checkpoint-50/weights.bin": WEIGHTS})
    client = client_for(fake)
    try:
        with pytest.raises(
            ResumeFailed,
            match=r"checkpoint checkpoint-50 file output/checkpoint-50/weights\.bin sha256 mis",
        ):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path,
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()
    assert not (tmp_path / "output/checkpoint-50/weights.bin").exists()
    assert not leftovers(tmp_path)


async def test_a_body_longer_than_listed_is_a_size_mismatch(tmp_path: Path) -> None:
    fake = ArtifactFake(live_attempt="a_2")
    committed(fake, {"output/checkpoint-50/weights.bin": WEIGHTS})
    fake.checkpoints["k_9"]["files"][0]["size"] = 10
    client = client_for(fake)
    try:
        with pytest.raises(
            ResumeFailed, match=r"size mismatch: expected 10 bytes, got more than 10$"
        ):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path,
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "bad_path", ["../../../etc/cron.d/x", "/etc/passwd", "output/\0x", "output//x", "a\\..\\b"]
)
async def test_a_file_list_naming_a_path_outside_the_folder_is_refused(
    tmp_path: Path, bad_path: str
) -> None:
    fake = ArtifactFake(live_attempt="a_2")
    committed(fake, {"output/checkpoint-50/weights.bin": WEIGHTS})
    fake.checkpoints["k_9"]["files"][0]["path"] = bad_path
    client = client_for(fake)
    try:
        with pytest.raises(ResumeFailed, match="is not a path inside the job folder"):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path / "job",
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("other", ["config.json", "progress.jsonl", "output/checkpoint-5/w"])
async def test_a_file_list_naming_a_file_outside_the_checkpoint_folder_is_refused(
    tmp_path: Path, other: str
) -> None:
    fake = ArtifactFake(live_attempt="a_2")
    committed(fake, {other: b"{}"})
    client = client_for(fake)
    try:
        with pytest.raises(ResumeFailed, match="is not in its folder output/checkpoint-50"):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path,
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()
    assert not os.listdir(tmp_path)


async def test_a_fenced_attempt_does_not_resume(tmp_path: Path) -> None:
    fake = ArtifactFake(live_attempt="a_3")
    committed(fake, FILES)
    client = client_for(fake)
    try:
        with pytest.raises(Fenced):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path,
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()


async def test_an_unknown_checkpoint_fails_the_resume_clearly(tmp_path: Path) -> None:
    fake = ArtifactFake(live_attempt="a_2")
    client = client_for(fake)
    try:
        with pytest.raises(ResumeFailed, match="checkpoint checkpoint-50 could not be fetched"):
            await download_checkpoint(
                client,
                RESUME,
                job_id="j_1",
                attempt_id="a_2",
                folder=tmp_path,
                backoff=lambda: Backoff(0.001, 0.01),
            )
    finally:
        await client.aclose()


@pytest.mark.parametrize("simpletuner", [False, True])
async def test_the_job_is_told_where_its_checkpoint_is(tmp_path: Path, simpletuner: bool) -> None:
    fake = ArtifactFake(live_attempt="a_2")
    committed(fake, FILES)
    event = {
        "job_id": "j_1",
        "attempt_id": "a_2",
        "config": {"output_dir": "output", "lr": 0.1},
        "command": None if simpletuner else ["python", "-c", "pass"],
        "resume": {
            "checkpoint_id": "k_9",
            "name": "checkpoint-50",
            "path": "output/checkpoint-50",
            "step": 50,
            "attempt_id": "a_1",
            "attempt_number": 1,
        },
    }
    client = client_for(fake)
    try:
        job = await prepare(
            Offer.from_event(event), tmp_path, [], client, lambda: Backoff(0.001, 0.01)
        )
    finally:
        await client.aclose()
    target = job.space.folder / "output/checkpoint-50"
    assert job.env["GPUFLEET_RESUME_FROM"] == str(target)
    assert job.env["GPUFLEET_CHECKPOINT_SIGNAL"] == "SIGUSR1"
    assert (target / "weights.bin").read_bytes() == WEIGHTS
    config = json.loads(job.space.config_path.read_text())
    if simpletuner:
        assert config == {"output_dir": "output", "lr": 0.1, "resume_from_checkpoint": str(target)}
    else:
        assert "resume_from_checkpoint" not in config
    assert job.resumed_path == "output/checkpoint-50"


async def test_an_offer_without_resume_sets_no_resume_folder(tmp_path: Path) -> None:
    event = {
        "job_id": "j_1",
        "attempt_id": "a_1",
        "config": {},
        "command": ["true"],
        "resume": None,
    }
    client = client_for(ArtifactFake())
    try:
        job = await prepare(Offer.from_event(event), tmp_path, [], client, lambda: Backoff(0.1, 1))
    finally:
        await client.aclose()
    assert "GPUFLEET_RESUME_FROM" not in job.env and job.resumed == []
