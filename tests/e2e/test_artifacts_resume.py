"""The issue's end-to-end case (#17): a checkpointing job loses its worker to SIGKILL, resumes
on another worker from its last checkpoint, ends with the result of an uninterrupted run, and
every artifact comes home: it downloads through the CLI and through the job page in Chromium,
each file with its listed sha256.

Once on SQLite with the data-folder store and one orchestrator, once on PostgreSQL with two
replicas sharing an object store (moto's S3 server, the stand-in for a cloud bucket): there the
workers speak to one replica and the downloads go through the other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from bench.s3 import new_bucket, s3_environment
from playwright.sync_api import expect, sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, LAPTOP, sign_in
from tests.conftest import fresh_database
from tests.e2e.commands import gf, ok
from tests.e2e.conftest import (
    ServerProcess,
    WorkerProcess,
    start_replicas,
    submit_job,
    wait_job,
)
from tests.waiting import wait_until

# A checkpoint every 50 steps, not 25: three or four of them (each one two files the worker
# uploads and the test downloads twice over, the last through Chromium), half as many; at
# 15 ms a step the first leaves 2 s to kill the worker before the job could end. The resumed
# attempt runs unpaced (`paced_until_resumed`).
STEPS, EVERY, STEP_DELAY = 200, 50, "0.015"
TRAIN = [
    sys.executable,
    "-m",
    "gpufleet.examples.train",
    "--backend",
    "numpy",  # PyTorch's import is seconds of CPU per attempt (`make test` installs it)
    "--steps",
    str(STEPS),
    "--checkpoint-every",
    str(EVERY),
    "--seed",
    "7",
]
MODEL_FIELDS = ("backend", "steps", "initial_loss", "loss", "accuracy", "weights", "bias")


class Orchestrator:
    """Where the workers connect, and where the user downloads (another replica, if any)."""

    def __init__(self, workers: ServerProcess, users: ServerProcess) -> None:
        self.workers, self.users = workers, users


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres-replicas-s3", marks=pytest.mark.postgres)],
)
def orchestrator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Orchestrator]:
    root = tmp_path_factory.mktemp("artifacts")
    if request.param == "sqlite":
        server = ServerProcess(root / "server", None, **{"heartbeat-timeout": 1})
        server.start()
        yield Orchestrator(server, server)
        server.kill(signal.SIGTERM)
        return
    endpoint = request.getfixturevalue("s3_endpoint")  # the test process's one moto server
    with fresh_database() as database:
        env = {**os.environ, **s3_environment(endpoint)}
        replicas = start_replicas(
            root,
            database,
            2,
            env=env,
            artifacts=f"s3://{new_bucket(endpoint)}/fleet",
            **{"heartbeat-timeout": 1},
        )
        yield Orchestrator(replicas[0], replicas[1])
        for replica in replicas:
            replica.kill(signal.SIGTERM)


def test_a_job_whose_worker_is_killed_resumes_from_its_checkpoint_and_every_artifact_comes_home(
    orchestrator: Orchestrator,
    agents: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    server, users = orchestrator.workers, orchestrator.users
    labels = {"pool": f"resume-{os.getpid()}-{id(tmp_path)}"}
    first = agents(server, labels=labels).start()
    job_id = submit_job(
        server,
        labels,
        paced_until_resumed(TRAIN, STEP_DELAY),
        config={"env": {"PYTHONUNBUFFERED": "1"}},
    )
    wait_until(
        lambda: listing(users, job_id)["checkpoints"],
        timeout=60,
        message="the job's first committed checkpoint",
    )
    kill_with_its_job(first)  # the spot instance is gone, the job's process with it

    second = agents(server, labels=labels).start()
    job = wait_job(users, job_id, "completed", "failed", timeout=120)
    assert job["status"] == "completed", job
    history = job["attempt_history"]
    assert [a["status"] for a in history][-1] == "completed"
    resumed = history[-1]["resumed_from"]
    assert resumed is not None and resumed["attempt_number"] == 1, history
    assert resumed["checkpoint"].startswith("checkpoint-") and resumed["step"] > 0
    assert history[-1]["worker_id"] == second.id != first.id

    for worker in (first, second):  # the ephemeral workers' folders die with them
        shutil.rmtree(worker.work_dir, ignore_errors=True)
    files = listing(users, job_id)
    out = tmp_path / "download"
    ok(gf(users, "jobs", "download", job_id, "-o", str(out)))
    final = [a for a in files["artifacts"] if a["attempt_id"] == history[-1]["id"]]
    assert {a["path"] for a in final} >= {"result.json"}
    for artifact in final:
        assert sha256(out / artifact["path"]) == artifact["sha256"], artifact["path"]

    downloaded = downloads_through_the_ui(users, job_id, len(files["artifacts"]), tmp_path)
    assert sorted(downloaded) == sorted(a["sha256"] for a in files["artifacts"])

    reference = tmp_path / "reference"
    reference.mkdir()
    subprocess.run([*TRAIN, "--output", "result.json"], cwd=reference, check=True, env=plain())
    got = json.loads((out / "result.json").read_text())
    want = json.loads((reference / "result.json").read_text())
    assert {k: got[k] for k in MODEL_FIELDS} == {k: want[k] for k in MODEL_FIELDS}


def downloads_through_the_ui(
    server: ServerProcess, job_id: str, count: int, folder: Path
) -> list[str]:
    """Click every file's link on the job page in Chromium; the sha256 of each download, each
    checked against the one its row shows."""
    got = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_context(viewport=LAPTOP, base_url=server.url).new_page()
            sign_in(page, server.admin_key, then=f"/queue/{job_id}")
            rows = page.locator("#artifacts tbody tr")
            for n in range(count):
                if n % 8 == 0:  # Chromium holds back a page's downloads past ten or so (its
                    page.goto(f"/queue/{job_id}")  # multiple-downloads guard): visit again
                    expect(rows).to_have_count(count)
                with page.expect_download() as download:
                    rows.nth(n).locator("a").first.click()
                saved = folder / f"ui-{n}"
                download.value.save_as(saved)
                got.append(sha256(saved))
                assert got[-1] == rows.nth(n).locator(".sha").get_attribute("title")
        finally:
            browser.close()
    return got


def listing(server: ServerProcess, job_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        resp = admin.get(f"/api/queue/{job_id}/artifacts")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def paced_until_resumed(train: list[str], step_delay: str) -> list[str]:
    """`train` at `step_delay` a step, and at full speed in an attempt that resumes (the worker
    sets GPUFLEET_RESUME_FROM): its pace only leaves time to kill the first attempt."""
    pace = f'd={step_delay}; [ -n "$GPUFLEET_RESUME_FROM" ] && d=0; exec "$@" --step-delay $d'
    return ["sh", "-c", pace, "sh", *train]


def kill_with_its_job(worker: WorkerProcess) -> None:
    assert worker.proc is not None
    family = psutil.Process(worker.proc.pid).children(recursive=True)
    worker.proc.kill()
    worker.proc.wait(timeout=10)
    for process in family:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def plain() -> dict[str, str]:
    """Our environment without any GPUFLEET_* (the reference run is no worker's job)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
