"""`gpufleet run --requirements/--setup/--download` (docs/jobs.md): a job's environment built
by real `gpufleet worker`s with uv, from a wheelhouse the test writes (tests/wheelhouse.py):
no index is reachable, nothing is downloaded."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uv import find_uv_bin

from tests.e2e.conftest import (
    GPUFLEET,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    job_state,
    serving,
    unique,
    wait_job,
)
from tests.e2e.test_orchestrator_address import run as gpufleet_in
from tests.waiting import wait_until
from tests.wheelhouse import PACKAGE, offline_env, write_wheel

JOB = f"""\
import os, pathlib, sys
import {PACKAGE}
print("VALUE", {PACKAGE}.VALUE, "from", sys.prefix == os.environ["VIRTUAL_ENV"])
print("setup left:", pathlib.Path("from-setup.txt").read_text().strip()
      if pathlib.Path("from-setup.txt").exists() else None)
pathlib.Path("output").mkdir(exist_ok=True)
pathlib.Path("output/result.txt").write_text("trained " + {PACKAGE}.VALUE)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("env-orchestrator"))


@pytest.fixture(scope="module")
def workers(
    server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[WorkerProcess]]:
    """Two workers sharing one work dir (so one environment cache), pointed at the wheelhouse."""
    root = tmp_path_factory.mktemp("env-workers")
    wheels = root / "wheels"
    write_wheel(wheels)
    env = offline_env(root / "uv-cache")
    agents = []
    for _ in range(2):
        agent = WorkerProcess(
            server,
            root,
            persistent=True,
            labels={"pool": "env"},
            extra_args=("--find-links", str(wheels)),
            env=env,
        )
        agent.work_dir = root / "one-work-dir"
        agents.append(agent.start())
    yield agents
    for agent in agents:
        agent.stop()


PYPROJECT = f"""\
[project]
name = "project-of-the-job"
version = "0.1"
requires-python = ">=3.11"
dependencies = ["{PACKAGE}"]
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory, workers: list[WorkerProcess]) -> Path:
    """The job's code; `project/` holds a pyproject.toml and its uv.lock, locked offline
    against the workers' wheelhouse."""
    root = tmp_path_factory.mktemp("env-checkout")
    (root / "job.py").write_text(JOB)
    (root / "requirements.txt").write_text(f"{PACKAGE}==1.0\n")
    (root / "bad.txt").write_text("no-such-package-in-the-wheelhouse==1.0\n")
    (root / "project").mkdir()
    (root / "project" / "pyproject.toml").write_text(PYPROJECT)
    wheels = workers[0].extra_args[1]
    subprocess.run(
        [find_uv_bin(), "lock", "--find-links", wheels],
        cwd=root / "project",
        env=offline_env(root.parent / "lock-cache"),
        check=True,
        capture_output=True,
    )
    return root


def run(server: ServerProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    connect = ("--url", server.url, "--api-key", server.admin_key, "--label", "pool=env")
    return gpufleet_in(cwd, "run", *connect, *args)


def job_id_of(result: subprocess.CompletedProcess[str]) -> str:
    line = next(x for x in result.stdout.splitlines() if x.startswith("Submitted job "))
    return line.split()[2]


def envs(agent: WorkerProcess) -> list[Path]:
    folder = agent.work_dir / "cache" / "envs"
    return [p for p in folder.iterdir() if not p.name.startswith(".")]


def test_two_jobs_with_the_same_requirements_build_one_env_and_run_with_its_python(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    submitted = [
        run(server, checkout, "--requirements", "requirements.txt", "--", "python", "job.py")
        for _ in range(2)
    ]
    ids = [job_id_of(result) for result in submitted]
    for job_id in ids:
        job = wait_job(server, job_id, "completed", "failed", timeout=60)
        assert job["status"] == "completed", (job, job_log_lines(server, job_id))
        assert "VALUE 42 from True" in job_log_lines(server, job_id)
    with server.admin() as admin:
        assert admin.get(f"/api/queue/{ids[0]}").json()["config"]["requirements"] == (
            f"{PACKAGE}==1.0\n"
        )
    assert len(envs(workers[0])) == 1  # one environment for both
    built = [
        job_id
        for job_id in ids
        if any("building environment" in line for line in job_log_lines(server, job_id))
    ]
    assert len(built) == 1, built  # the other job found it built, or waited for it


def test_a_requirement_uv_cannot_meet_fails_the_job_with_uvs_words_and_the_worker_stays(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    result = run(server, checkout, "--wait", "--requirements", "bad.txt", "--", "python", "job.py")
    assert result.returncode == 1, result.stdout + result.stderr
    job_id = job_id_of(result)
    job = job_state(server, job_id)
    assert job["status"] == "failed"
    assert "could not start: the environment could not be built" in job["error"]
    # uv's own explanation, in the job's log (and followed live by --wait)
    assert any("no-such-package-in-the-wheelhouse" in x for x in job_log_lines(server, job_id))
    assert "no-such-package-in-the-wheelhouse" in result.stdout
    assert all(agent.running() for agent in workers)
    wait_until(
        lambda: all(agent.record()["status"] == "idle" for agent in workers),
        timeout=10,
        message="the workers to be idle again",
    )


def test_setup_runs_first_in_the_jobs_folder_and_download_brings_its_outputs_home(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path, tmp_path: Path
) -> None:
    setup = "echo setting up with $(basename $VIRTUAL_ENV | cut -c1-6); echo ok > from-setup.txt"
    home = tmp_path / "home"
    result = run(
        server,
        checkout,
        "--wait",
        "--requirements",
        "requirements.txt",
        "--setup",
        setup,
        "--download",
        str(home),
        "--",
        "python",
        "job.py",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = job_log_lines(server, job_id_of(result))
    assert any(line.startswith("setting up with ") for line in lines), lines
    assert "setup left: ok" in lines
    assert (home / "output" / "result.txt").read_text() == "trained 42"
    assert f"into {home}" in result.stderr


def test_a_failing_setup_fails_the_job_before_its_command_saying_so(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    result = run(
        server, checkout, "--wait", "--setup", "echo nope; exit 3", "--", "python", "job.py"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    job = job_state(server, job_id_of(result))
    assert job["status"] == "failed"
    assert "could not start: the setup command exited with code 3" in job["error"]
    # --wait says why, not only that the job failed
    assert "Error: could not start: the setup command exited with code 3" in result.stderr
    assert "nope" in job_log_lines(server, job["id"])
    assert not any("VALUE" in line for line in job_log_lines(server, job["id"]))


def test_a_setup_is_shipped_live_and_a_cancel_stops_it_and_the_job(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    begun = unique("setup-begun")
    result = run(server, checkout, "--setup", f"echo {begun}; sleep 60", "--", "python", "job.py")
    job_id = job_id_of(result)
    wait_until(  # its line is in the log while the setup still runs
        lambda: begun in job_log_lines(server, job_id),
        timeout=20,
        message="the setup's first line in the job's log",
    )
    with server.admin() as admin:
        assert admin.post(f"/api/queue/{job_id}/cancel").status_code == 200
    job = wait_job(server, job_id, "cancelled", "failed", timeout=20)
    assert job["status"] == "cancelled", job
    assert not any("VALUE" in line for line in job_log_lines(server, job_id))
    wait_until(
        lambda: all(agent.record()["status"] == "idle" for agent in workers),
        timeout=10,
        message="the workers to be idle again",
    )


@pytest.mark.parametrize("env_from", ["project/pyproject.toml", "project/uv.lock"])
def test_an_env_from_a_project_file_of_the_workdir_gives_the_job_its_packages(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path, env_from: str
) -> None:
    result = run(server, checkout, "--wait", "--env-from", env_from, "--", "python", "job.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VALUE 42 from True" in result.stdout


def test_an_env_from_that_the_workdir_lacks_is_refused_before_anything_is_submitted(
    server: ServerProcess, checkout: Path
) -> None:
    result = run(server, checkout, "--env-from", "nowhere/uv.lock", "--", "python", "job.py")
    assert result.returncode == 1
    assert "--env-from nowhere/uv.lock: no such file in the workdir" in result.stderr
    assert "Submitted job" not in result.stdout


def test_ctrl_c_without_a_terminal_detaches_and_the_job_goes_on(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    started = unique("started")
    (checkout / "slow.py").write_text(f"import time\nprint({started!r})\ntime.sleep(60)\n")
    proc, job_id = following(server, checkout, subprocess.DEVNULL, started)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 130
        assert f"Stopped following; job {job_id} goes on" in err.decode()
        assert "cancel the job?" not in err.decode()
        assert job_state(server, job_id)["status"] == "running"
    finally:
        with server.admin() as admin:
            admin.post(f"/api/queue/{job_id}/cancel")
        wait_job(server, job_id, "cancelled", timeout=20)


def following(
    server: ServerProcess, checkout: Path, stdin: Any, started: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`gpufleet run --wait -- python slow.py`, once the job's first line (`started`) came."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    connect = ["--url", server.url, "--api-key", server.admin_key, "--label", "pool=env"]
    proc = subprocess.Popen(
        [GPUFLEET, "run", *connect, "--wait", "--", "python", "slow.py"],
        # As typed at a prompt, whatever started the tests: a test run started in the
        # background by a script (a CI runner's `cmd &`) ignores SIGINT, and so would this
        # command, inheriting it (a failure seen that way: the command never heard Ctrl-C).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        cwd=checkout,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    seen: list[str] = []
    while started not in "".join(seen):
        line = proc.stdout.readline().decode()
        if not line:
            proc.kill()
            raise AssertionError(f"gpufleet run ended before the job's first line: {seen}")
        seen.append(line)
    return proc, next(x for x in seen if x.startswith("Submitted job ")).split()[2]


def test_ctrl_c_on_a_terminal_asks_and_cancel_cancels_the_job(
    server: ServerProcess, workers: list[WorkerProcess], checkout: Path
) -> None:
    started = unique("started")
    (checkout / "slow.py").write_text(f"import time\nprint({started!r})\ntime.sleep(60)\n")
    leader, follower = pty.openpty()
    try:
        proc, job_id = following(server, checkout, follower, started)
        os.close(follower)
        proc.send_signal(signal.SIGINT)
        os.write(leader, b"cancel\n")  # the terminal holds it until the question reads it
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 130
        assert "Detach (the job goes on) or cancel the job?" in err.decode()
        assert f"Job {job_id} is cancel" in err.decode()
        wait_job(server, job_id, "cancelled", timeout=20)
    finally:
        os.close(leader)
