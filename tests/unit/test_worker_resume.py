"""Resuming: the worker fetches the offered checkpoint into the new job folder, checks every
file, and tells the job where it is; anything wrong fails the attempt before it starts.

Against the real orchestrator on a real socket (tests/worker_orchestrator.py), on the data
folder and on object storage: a job's first attempt uploads and commits a checkpoint, is
preempted, and the job's next attempt is offered with `resume`. A corrupt file is a changed
blob in the store's folder; a hostile file list is the real answer tampered with on the wire.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.worker.backoff import Backoff
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.errors import Fenced
from gpufleet.worker.offer import Offer
from gpufleet.worker.resume import Resume, ResumeFailed, download_checkpoint
from gpufleet.worker.starting import prepare
from gpufleet.worker.uploads import FileDigest
from tests.api.artifacts.uploads import upload_checkpoint
from tests.api.conftest import Fleet
from tests.api.test_simpletuner_dialect import SIMPLETUNER_JOB
from tests.worker_orchestrator import (
    Held,
    Wire,
    held_attempt,
    module_fleets,
    url_of,
)

on_the_fleet = pytest.mark.asyncio(loop_scope="module")


def leftovers(folder: Path) -> list[str]:
    return [name for _, _, names in os.walk(folder) for name in names if name.endswith(".part")]


WEIGHTS = bytes(range(256)) * 5000
FILES = {
    "output/checkpoint-50/weights.bin": WEIGHTS,
    "output/checkpoint-50/state.json": b'{"step": 50}',
}


orchestrator, s3_orchestrator, via, fleet = module_fleets()


async def resumed(fleet: Fleet, files: dict[str, bytes] = FILES, **submit: Any) -> tuple[Held, str]:
    """A job whose first attempt committed `files` as checkpoint-50 and was preempted; its
    second attempt is running, offered with `resume`. Returns it and the first attempt's id."""
    held = await held_attempt(fleet, **submit)
    first = held.attempt_id
    prefix = "output/checkpoint-50/"
    committed = await upload_checkpoint(
        held.agent, held.offer, 50, {path.removeprefix(prefix): d for path, d in files.items()}
    )
    assert committed.status_code == 201, committed.text
    offer = await held.preempt()
    assert offer["resume"]["checkpoint_id"] == committed.json()["id"]
    return held, first


def resume_of(held: Held) -> Resume:
    resume = Resume.from_offer(held.offer["resume"])
    assert resume is not None
    return resume


async def download(
    held: Held, wire: Wire, folder: Path, resume: Resume | None = None, attempt: str = ""
) -> list[FileDigest]:
    client = held.client(wire)
    try:
        return await download_checkpoint(
            client,
            resume or resume_of(held),
            job_id=held.job_id,
            attempt_id=attempt or held.attempt_id,
            folder=folder,
            backoff=lambda: Backoff(0.001, 0.01),
        )
    finally:
        await client.aclose()


def listed_file(change: Callable[[dict[str, Any]], None]) -> Callable[[httpx.Request, Any], Any]:
    """A tamper of the checkpoint's file list (the first file changed by `change`)."""

    def tamper(request: httpx.Request, answer: Any) -> Any:
        if "/checkpoints/" not in request.url.path:
            return None
        change(answer["files"][0])
        return answer

    return tamper


@on_the_fleet
async def test_every_file_lands_at_its_path_checked(fleet: Fleet, via: str, tmp_path: Path) -> None:
    held, _ = await resumed(fleet)
    wire = Wire()
    placed = await download(held, wire, tmp_path)
    assert {f.path for f in placed} == set(FILES)
    for path, data in FILES.items():
        assert (tmp_path / path).read_bytes() == data
    fetch = wire.sent[0]
    assert fetch.method == "GET"
    assert fetch.url == (
        f"{url_of(fleet)}/api/workers/job/{held.job_id}/checkpoints/"
        f"{resume_of(held).checkpoint_id}?attempt_id={held.attempt_id}"
    )
    downloads = wire.sent[1:]
    assert len(downloads) == 2 and all(d.status == 200 for d in downloads)
    if via == "store":
        assert all(d.token is None for d in downloads)  # presigned: the token stays home
        assert not any(d.url.startswith(url_of(fleet)) for d in downloads)
    else:
        assert all(
            d.token == held.agent.token and f"attempt_id={held.attempt_id}" in d.url
            for d in downloads
        )
    assert not leftovers(tmp_path)


@on_the_fleet
async def test_a_corrupt_file_fails_the_resume_naming_it_and_leaves_nothing(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held, first = await resumed(orchestrator)
    blob = held.blob(first, "output/checkpoint-50/weights.bin")
    blob.write_bytes(b"X" + WEIGHTS[1:])  # the disk under the store rotted
    with pytest.raises(
        ResumeFailed,
        match=r"checkpoint checkpoint-50 file output/checkpoint-50/weights\.bin sha256 mis",
    ):
        await download(held, Wire(), tmp_path)
    assert not (tmp_path / "output/checkpoint-50/weights.bin").exists()
    assert not leftovers(tmp_path)


@on_the_fleet
async def test_a_body_longer_than_listed_is_a_size_mismatch(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held, _ = await resumed(orchestrator, {"output/checkpoint-50/weights.bin": WEIGHTS})
    wire = Wire(tamper=listed_file(lambda f: f.update(size=10)))
    with pytest.raises(ResumeFailed, match=r"size mismatch: expected 10 bytes, got more than 10$"):
        await download(held, wire, tmp_path)
    assert not leftovers(tmp_path)


@on_the_fleet
@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("size", 2**64, "bad size"),
        ("size", -1, "bad size"),
        ("size", True, "bad size"),
        ("sha256", "0" * 63, "bad sha256"),
        ("sha256", "../" + "0" * 61, "bad sha256"),
    ],
)
async def test_a_file_list_with_a_size_or_sha256_that_cannot_be_is_refused(
    orchestrator: Fleet, tmp_path: Path, field: str, value: Any, why: str
) -> None:
    held, _ = await resumed(orchestrator)
    wire = Wire(tamper=listed_file(lambda f: f.update({field: value})))
    with pytest.raises(ResumeFailed, match=why):
        await download(held, wire, tmp_path)
    assert not os.listdir(tmp_path)


@on_the_fleet
@pytest.mark.parametrize(
    "bad_path", ["../../../etc/cron.d/x", "/etc/passwd", "output/\0x", "output//x", "a\\..\\b"]
)
async def test_a_file_list_naming_a_path_outside_the_folder_is_refused(
    orchestrator: Fleet, tmp_path: Path, bad_path: str
) -> None:
    held, _ = await resumed(orchestrator)
    wire = Wire(tamper=listed_file(lambda f: f.update(path=bad_path)))
    with pytest.raises(ResumeFailed, match="is not a path inside the job folder"):
        await download(held, wire, tmp_path / "job")
    assert not os.listdir(tmp_path)
    assert len(wire.sent) == 1  # nothing was downloaded


@on_the_fleet
@pytest.mark.parametrize("other", ["config.json", "progress.jsonl", "output/checkpoint-5/w"])
async def test_a_file_list_naming_a_file_outside_the_checkpoint_folder_is_refused(
    orchestrator: Fleet, tmp_path: Path, other: str
) -> None:
    held, _ = await resumed(orchestrator)
    wire = Wire(tamper=listed_file(lambda f: f.update(path=other)))
    with pytest.raises(ResumeFailed, match="is not in its folder output/checkpoint-50"):
        await download(held, wire, tmp_path)
    assert not os.listdir(tmp_path)


@on_the_fleet
async def test_a_fenced_attempt_does_not_resume(orchestrator: Fleet, tmp_path: Path) -> None:
    held, first = await resumed(orchestrator)
    wire = Wire()
    with pytest.raises(Fenced):  # the preempted attempt asks for the checkpoint
        await download(held, wire, tmp_path, attempt=first)
    assert [s.status for s in wire.sent] == [409]
    assert not os.listdir(tmp_path)


@on_the_fleet
async def test_an_unknown_checkpoint_fails_the_resume_clearly(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held, _ = await resumed(orchestrator)
    unknown = Resume("k_000000000000", "checkpoint-50", "output/checkpoint-50", 50)
    with pytest.raises(ResumeFailed, match="checkpoint checkpoint-50 could not be fetched"):
        await download(held, Wire(), tmp_path, unknown)


def client_of(held: Held) -> OrchestratorClient:
    return held.client(Wire())


@on_the_fleet
@pytest.mark.parametrize("simpletuner", [False, True])
async def test_the_job_is_told_where_its_checkpoint_is(
    orchestrator: Fleet, tmp_path: Path, simpletuner: bool
) -> None:
    config = (
        {**SIMPLETUNER_JOB, "output_dir": "output", "lr": 0.1}
        if simpletuner
        else {"command": ["python", "-c", "pass"], "output_dir": "output", "lr": 0.1}
    )
    held, _ = await resumed(orchestrator, config=config)
    client = client_of(held)
    try:
        job = await prepare(
            Offer.from_event(held.offer), tmp_path, [], client, lambda: Backoff(0.001, 0.01)
        )
    finally:
        await client.aclose()
    target = job.space.folder / "output/checkpoint-50"
    assert job.env["GPUFLEET_RESUME_FROM"] == str(target)
    assert job.env["GPUFLEET_CHECKPOINT_SIGNAL"] == "SIGUSR1"
    assert (target / "weights.bin").read_bytes() == WEIGHTS
    written = json.loads(job.space.config_path.read_text())
    if simpletuner:
        assert written["resume_from_checkpoint"] == str(target)
        assert (written["output_dir"], written["lr"]) == ("output", 0.1)
    else:
        assert "resume_from_checkpoint" not in written
    assert job.resumed_path == "output/checkpoint-50"


@on_the_fleet
async def test_an_offer_without_resume_sets_no_resume_folder(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held = await held_attempt(orchestrator)
    assert held.offer["resume"] is None
    wire = Wire()
    client = held.client(wire)
    try:
        job = await prepare(
            Offer.from_event(held.offer), tmp_path, [], client, lambda: Backoff(0.1, 1)
        )
    finally:
        await client.aclose()
    assert "GPUFLEET_RESUME_FROM" not in job.env and job.resumed == []
    assert wire.sent == []
