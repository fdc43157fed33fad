"""Checkpoints while a job trains: the progress file's checkpoint lines, folders that have
stopped changing, and the shipper that uploads and commits each checkpoint once, to the real
orchestrator on a real socket (tests/worker_orchestrator.py), read back through its user API."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpufleet import progress
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.checkpoints import CheckpointShipper, StableFolders, snapshot, step_of
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.keep import KeepRules
from gpufleet.worker.relay import CheckpointNote, ProgressTail
from gpufleet.worker.uploads import BandwidthLimiter, Uploader
from tests.api.conftest import Fleet
from tests.waiting import wait_until_async
from tests.worker_orchestrator import Held, Wire, held_attempt, module_fleets

on_the_fleet = pytest.mark.asyncio(loop_scope="module")
LIMIT = 64 * 1024  # the orchestrator's per-job artifact limit here


def test_checkpoint_lines_go_to_the_uploader_not_to_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "progress.jsonl"
    monkeypatch.setenv(progress.PROGRESS_FILE_ENV, str(file))
    tail = ProgressTail(file)

    progress.report(step=5, total=10, loss=0.5)
    progress.checkpoint("output/checkpoint-5", step=5)
    progress.checkpoint(tmp_path / "output/checkpoint-6")
    assert tail.poll() == {"step": 5, "total": 10, "metrics": {"loss": 0.5}}
    assert tail.latest == {"step": 5, "total": 10, "metrics": {"loss": 0.5}}
    assert tail.take_checkpoints() == [
        CheckpointNote("output/checkpoint-5", 5),
        CheckpointNote(str(tmp_path / "output/checkpoint-6"), None),
    ]
    assert tail.take_checkpoints() == []
    assert tail.checkpoints_announced == 2
    assert not tail.handles_checkpoint_signal


def test_a_checkpoint_path_with_a_nul_is_refused_in_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(progress.PROGRESS_FILE_ENV, str(tmp_path / "p.jsonl"))
    with pytest.raises(ValueError, match="NUL"):
        progress.checkpoint("output/\0x")
    assert not (tmp_path / "p.jsonl").exists()


def test_odd_checkpoint_lines_are_skipped_and_a_bad_step_dropped(tmp_path: Path) -> None:
    file = tmp_path / "progress.jsonl"
    file.write_text(
        '{"checkpoint": 5}\n{"checkpoint": ""}\n{"checkpoint": "a", "step": "x"}\n'
        '{"checkpoint": "b", "step": true}\n{"checkpoint_signal": "yes"}\n{"checkpoint": "c'
    )
    tail = ProgressTail(file)
    tail.poll()
    assert tail.take_checkpoints() == [CheckpointNote("a", None), CheckpointNote("b", None)]
    assert not tail.handles_checkpoint_signal  # only a literal true says it


def test_a_folder_is_stable_once_unchanged_over_two_polls_and_reported_once() -> None:
    stable = StableFolders()
    one = (("c/w", 10, 1),)
    assert stable.observe({"c": one}) == []
    assert stable.observe({"c": (("c/w", 20, 2),)}) == []  # still being written
    assert stable.observe({"c": (("c/w", 20, 2),)}) == ["c"]
    assert stable.observe({"c": (("c/w", 20, 2),)}) == []
    assert stable.observe({"e": ()}) == [] and stable.observe({"e": ()}) == []  # empty: never


def test_a_snapshot_sees_sizes_and_mtimes(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c/w").write_bytes(b"1")
    first = snapshot(tmp_path, "c")
    (tmp_path / "c/w").write_bytes(b"12")
    assert snapshot(tmp_path, "c") != first
    assert [entry[:2] for entry in snapshot(tmp_path, "c")] == [("c/w", 2)]


@pytest.mark.parametrize(
    ("name", "step"),
    [("checkpoint-1200", 1200), ("step_7", 7), ("final", None), ("c-" + "9" * 30, None)],
)
def test_the_step_comes_from_a_folder_s_trailing_number(name: str, step: int | None) -> None:
    assert step_of(name) == step


orchestrator, *_ = module_fleets(artifact_max_job_bytes=LIMIT)  # one orchestrator for the module


def shipper(
    held: Held, wire: Wire, folder: Path, rules: KeepRules
) -> tuple[CheckpointShipper, OrchestratorClient, ProgressTail]:
    client = held.client(wire)
    uploader = Uploader(
        held.job_id,
        held.attempt_id,
        folder,
        client,
        BandwidthLimiter(0),
        lambda: Backoff(0.001, 0.01),
    )
    (folder / "progress.jsonl").touch()
    tail = ProgressTail(folder / "progress.jsonl")
    return CheckpointShipper(folder, rules, tail, uploader, interval=0.02), client, tail


def write_checkpoint(folder: Path, name: str, size: int = 100) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "weights.bin").write_bytes(os.urandom(size))
    (folder / name / "state.json").write_text(json.dumps({"name": name}))


async def checkpoints(held: Held) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await held.listing())["checkpoints"]
    return found


@on_the_fleet
async def test_an_announced_checkpoint_is_uploaded_and_committed_once(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held = await held_attempt(orchestrator)
    wire = Wire()
    ship, client, _ = shipper(held, wire, tmp_path, KeepRules(checkpoints=("output/checkpoint-*",)))
    write_checkpoint(tmp_path, "output/checkpoint-3")
    with (tmp_path / "progress.jsonl").open("a") as file:
        file.write('{"checkpoint": "output/checkpoint-3", "step": 3}\n')
        file.write(f'{{"checkpoint": "{tmp_path}/output/checkpoint-3"}}\n')  # again, absolute
        file.write('{"checkpoint": "../../etc"}\n')
        file.write('{"checkpoint": "output/missing"}\n')
    task = asyncio.create_task(ship.run())
    await asyncio.wait_for(ship.wait_for_note(4), 5)
    # Deliberate, a check that nothing happens: several polls in which the glob sees the
    # folder too, and must not commit it again.
    await asyncio.sleep(0.1)
    ship.end(completed=True)
    await asyncio.wait_for(task, 5)
    await client.aclose()

    listing = await held.listing()
    (committed,) = listing["checkpoints"]
    assert (committed["name"], committed["step"], committed["path"]) == (
        "checkpoint-3",
        3,
        "output/checkpoint-3",
    )
    assert committed["files"] == 2 and committed["attempt_id"] == held.attempt_id
    assert sorted((a["path"], a["kind"], a["checkpoint"]) for a in listing["artifacts"]) == [
        ("output/checkpoint-3/state.json", "checkpoint", "checkpoint-3"),
        ("output/checkpoint-3/weights.bin", "checkpoint", "checkpoint-3"),
    ]
    assert len(wire.announces()) == 2  # each file once
    stored = await held.stored()
    assert (
        stored[(held.attempt_id, "output/checkpoint-3/weights.bin")]
        == (tmp_path / "output/checkpoint-3/weights.bin").read_bytes()
    )


@on_the_fleet
async def test_a_glob_checkpoint_is_committed_once_it_stops_changing(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held = await held_attempt(orchestrator)
    ship, client, _ = shipper(held, Wire(), tmp_path, KeepRules(checkpoints=("ckpt/step-*",)))
    ship.skip("ckpt/step-1")  # the one this attempt resumed from
    write_checkpoint(tmp_path, "ckpt/step-1")
    write_checkpoint(tmp_path, "ckpt/step-2")
    task = asyncio.create_task(ship.run())
    await wait_until_async(
        lambda: ship.commits, timeout=2, message="a committed checkpoint", interval=0.02
    )
    ship.end(completed=False)
    await asyncio.wait_for(task, 5)
    await client.aclose()
    assert [(c["name"], c["step"]) for c in await checkpoints(held)] == [("step-2", 2)]
    assert not any(path.startswith("ckpt/step-1/") for _, path in await held.stored())


@on_the_fleet
async def test_a_folder_still_changing_at_a_failure_is_not_committed(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held = await held_attempt(orchestrator)
    ship, client, _ = shipper(held, Wire(), tmp_path, KeepRules(checkpoints=("c-*",)))
    write_checkpoint(tmp_path, "c-1")
    ship.end(completed=False)  # seen once only: it may be half written
    await asyncio.wait_for(ship.run(), 5)
    assert await checkpoints(held) == []
    assert await held.stored() == {}

    ship2, client2, _ = shipper(held, Wire(), tmp_path, KeepRules(checkpoints=("c-*",)))
    ship2.end(completed=True)  # the process completed: what it left is whole
    await asyncio.wait_for(ship2.run(), 5)
    await client.aclose()
    await client2.aclose()
    assert [c["name"] for c in await checkpoints(held)] == ["c-1"]


@on_the_fleet
async def test_a_checkpoint_with_a_file_refused_is_not_committed(
    orchestrator: Fleet, tmp_path: Path
) -> None:
    held = await held_attempt(orchestrator)
    ship, client, _ = shipper(held, Wire(), tmp_path, KeepRules(checkpoints=("c-*",)))
    write_checkpoint(tmp_path, "c-1", size=LIMIT + 1)  # over the job's limit: 413
    ship.end(completed=True)
    await asyncio.wait_for(ship.run(), 5)
    await client.aclose()
    assert await checkpoints(held) == []
    assert set(await held.stored()) == {(held.attempt_id, "c-1/state.json")}
    summary = ship._uploader.summary() or ""
    assert summary.startswith("1 upload(s) failed: c-1/weights.bin: the orchestrator refused")
    assert "(413)" in summary
