"""`gpufleet run` (docs/jobs.md): a command run on a real `gpufleet worker` with the code of
a temporary git checkout, uploaded to a real `gpufleet server` as a workdir snapshot."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.artifacts.workdir_archive import pack
from tests.artifact_uploads import s3_serving
from tests.e2e.conftest import (
    Member,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    serving,
    unique,
)
from tests.e2e.test_orchestrator_address import run as gpufleet_in
from tests.waiting import wait_until

TRAIN = """\
import pathlib, sys
print("data:", pathlib.Path("data/words.txt").read_text().strip())
print("secret here:", pathlib.Path("secret.txt").exists(), pathlib.Path("big.bin").exists())
pathlib.Path("data/words.txt").write_text("scribbled by the job")
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("run-orchestrator"))


@pytest.fixture(scope="module")
def worker(
    server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    agent = WorkerProcess(
        server, tmp_path_factory.mktemp("run-workers"), persistent=True, labels={"pool": "run"}
    )
    agent.start()
    yield agent
    agent.proc and agent.proc.send_signal(signal.SIGTERM)
    agent.stop()


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git checkout with a script, its data, an ignored secret and a big file left out by
    .gpufleetignore."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "train.py").write_text(TRAIN)
    (root / "data").mkdir()
    (root / "data" / "words.txt").write_text(unique("words"))
    (root / ".gitignore").write_text("secret.txt\n")
    (root / ".gpufleetignore").write_text("*.bin\n")
    (root / "secret.txt").write_text("the key to everything")
    (root / "big.bin").write_bytes(b"\0" * 4096)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "code"], check=True)
    return root


def run(server: ServerProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpufleet run ARGS` typed in `cwd`, against `server`, for the module's worker."""
    connect = ("--url", server.url, "--api-key", server.admin_key, "--label", "pool=run")
    return gpufleet_in(cwd, "run", *connect, *args)


def sent(result: subprocess.CompletedProcess[str]) -> int:
    """The bytes `gpufleet run` says it sent."""
    line = next(x for x in result.stdout.splitlines() if " bytes sent" in x)
    return int(line.split()[0])


def job_id_of(result: subprocess.CompletedProcess[str]) -> str:
    line = next(x for x in result.stdout.splitlines() if x.startswith("Submitted job "))
    return line.split()[2]


def test_run_brings_the_checkout_waits_and_exits_with_the_jobs_code(
    server: ServerProcess, worker: WorkerProcess, checkout: Path
) -> None:
    first = run(server, checkout, "--wait", "--", "python", "train.py", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    assert sent(first) > 0
    words = (checkout / "data" / "words.txt").read_text().strip()
    assert f"data: {words}" in first.stdout  # followed live by --wait
    assert "secret here: False False" in first.stdout
    # Ignored files stayed home: nothing of them reached the worker's machine.
    assert not list(worker.work_dir.rglob("secret.txt"))
    assert not list(worker.work_dir.rglob("big.bin"))

    second = run(server, checkout, "--wait", "--", "python", "train.py", "3")
    assert second.returncode == 3, second.stdout + second.stderr
    assert sent(second) == 0  # the same checkout: its snapshot is stored already
    # The first job scribbled on its copy; the second read the snapshot's own words, and
    # the cached archive is still the snapshot it was.
    assert f"data: {words}" in job_log_lines(server, job_id_of(second))
    cached = list((worker.work_dir / "cache" / "workdirs").glob("*.tar"))
    assert len(cached) == 1
    assert hashlib.sha256(cached[0].read_bytes()).hexdigest() == cached[0].stem


def test_a_run_after_another_takes_its_outputs_into_inputs_before_it_starts(
    server: ServerProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    """Dependencies (docs/jobs.md): B runs after A, and finds A's output/x, stored as A's
    artifact, at inputs/<A>/output/x in its folder when its command starts."""
    words = unique("from upstream")
    (tmp_path / "write.py").write_text(
        "import pathlib\n"
        'pathlib.Path("output").mkdir(exist_ok=True)\n'
        f'pathlib.Path("output/x").write_text("{words}")\n'
    )
    (tmp_path / "read.py").write_text(
        'import pathlib, sys\nprint("got:", pathlib.Path(sys.argv[1]).read_text())\n'
    )
    first = run(server, tmp_path, "--", "python", "write.py")
    assert first.returncode == 0, first.stdout + first.stderr
    upstream = job_id_of(first)
    second = run(
        server,
        tmp_path,
        "--after",
        upstream,
        "--input",
        f"{upstream}=output/**",
        "--wait",
        "--",
        "python",
        "read.py",
        f"inputs/{upstream}/output/x",
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"got: {words}" in second.stdout
    with server.admin() as admin:
        shown = admin.get(f"/api/queue/{job_id_of(second)}").json()
        assert shown["depends_on"] == [{"job": upstream, "on": "completed", "status": "completed"}]
        assert admin.get(f"/api/queue/{upstream}").json()["dependents"][0]["status"] == "completed"


def test_a_file_changed_at_the_same_size_and_time_is_sent_again(
    server: ServerProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    """`gpufleet run` remembers an unchanged folder's digest (cli/digests.py); an edit that
    keeps the file's size and modification time still changes what the job gets."""
    script = tmp_path / "train.py"
    script.write_text('print("version", "one")\n')
    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(script, ns=(an_hour_ago, an_hour_ago))  # a settled file: its digest remembered
    first = run(server, tmp_path, "--wait", "--", "python", "train.py")
    assert first.returncode == 0 and sent(first) > 0, first.stdout + first.stderr
    again = run(server, tmp_path, "--wait", "--", "python", "train.py")
    assert sent(again) == 0 and "version one" in again.stdout
    script.write_text('print("version", "two")\n')
    os.utime(script, ns=(an_hour_ago, an_hour_ago))
    second = run(server, tmp_path, "--wait", "--", "python", "train.py")
    assert second.returncode == 0 and sent(second) > 0, second.stdout + second.stderr
    assert "version two" in second.stdout


def test_run_without_wait_submits_and_says_how_to_follow(
    server: ServerProcess, worker: WorkerProcess, checkout: Path
) -> None:
    result = run(server, checkout, "--env", "GREETING=hi", "--", "python", "train.py", "0")
    assert result.returncode == 0, result.stderr
    assert "Follow it: gpufleet jobs watch" in result.stdout
    with server.admin() as admin:
        config = admin.get(f"/api/queue/{job_id_of(result)}").json()["config"]
    assert config["workdir"].startswith("sha256:")
    assert config["env"] == {"GREETING": "hi"}


# Reports two steps of a loss made of its point's values (placeholders the sweep fills in).
SWEPT = (
    "import json, os; f = open(os.environ['GPUFLEET_PROGRESS_FILE'], 'a'); "
    "[f.write(json.dumps(dict(step=s, total=2, metrics=dict(loss={lr} * {batch} / s))) + '\\n') "
    "for s in (1, 2)]; f.close(); print('point', os.environ['GPUFLEET_SWEEP_PARAMS'])"
)


def test_a_2x2_sweep_runs_its_four_points_and_shows_their_metrics_and_curves(
    server: ServerProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    made = run(
        server,
        tmp_path,
        *("--sweep", "lr=0.5,0.25", "--sweep", "batch=2,4", "--max-parallel", "1"),
        *("--", "python", "-c", SWEPT),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    line = next(x for x in made.stdout.splitlines() if x.startswith("Submitted sweep "))
    sweep_id = line.split()[2].rstrip(":")
    assert "4 jobs of lr (2) x batch (2)" in line

    with server.admin() as admin:

        def ended() -> dict[str, Any] | None:
            found: dict[str, Any] = admin.get(f"/api/sweeps/{sweep_id}").json()
            return found if found["status"] in ("completed", "failed", "cancelled") else None

        sweep = wait_until(ended, timeout=90, message=f"sweep {sweep_id} to end")
        curves = admin.get(f"/api/sweeps/{sweep_id}/progress", params={"metric": "loss"}).json()
    assert sweep["status"] == "completed", sweep
    finals = {
        (j["params"]["lr"], j["params"]["batch"]): j["metrics"]["loss"] for j in sweep["jobs"]
    }
    assert finals == {(0.5, 2): 0.5, (0.5, 4): 1.0, (0.25, 2): 0.25, (0.25, 4): 0.5}
    first = curves["curves"][0]  # the grid's first point: lr 0.5, batch 2
    assert [p[:2] for p in first["points"]] == [[1, 1.0], [2, 0.5]]
    assert 'point {"lr":0.5,"batch":2}' in job_log_lines(server, sweep["jobs"][0]["job_id"])
    shown = gpufleet_in(tmp_path, "sweeps", "show", sweep_id, "--sort", "loss", *connect(server))
    assert shown.returncode == 0, shown.stderr
    rows = [x.split() for x in shown.stdout.splitlines() if x.startswith("j_")]
    assert [r[-1] for r in rows] == ["0.25", "0.5", "0.5", "1"]  # by loss, ascending
    listed = gpufleet_in(tmp_path, "sweeps", "list", *connect(server))
    assert sweep_id in listed.stdout and "4 completed" in listed.stdout, listed.stdout
    for verb, said in (("cancel", "no job left to cancel"), ("rerun", "no failed or cancelled")):
        refused = gpufleet_in(tmp_path, "sweeps", verb, sweep_id, *connect(server))
        assert refused.returncode == 1 and said in refused.stderr, refused.stderr


def connect(server: ServerProcess) -> tuple[str, ...]:
    return ("--url", server.url, "--api-key", server.admin_key)


def test_a_second_users_run_of_the_same_checkout_sends_its_bytes_and_runs(
    server: ServerProcess, worker: WorkerProcess, checkout: Path
) -> None:
    """A digest proves nothing (docs/security.md): another user holding the same files sends
    them once, to prove it, and then runs as the first did."""
    first = run(server, checkout, "--", "python", "train.py", "0")  # the admin's: stored
    assert first.returncode == 0, first.stdout + first.stderr
    other = Member(server, "second", "researcher")
    connect = ("--url", server.url, "--api-key", other.key, "--label", "pool=run")
    theirs = gpufleet_in(checkout, "run", *connect, "--wait", "--", "python", "train.py", "0")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert sent(theirs) > 0 and "had this snapshot" in theirs.stdout
    words = (checkout / "data" / "words.txt").read_text().strip()
    assert f"data: {words}" in theirs.stdout
    again = gpufleet_in(checkout, "run", *connect, "--", "python", "train.py", "0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert sent(again) == 0  # now they hold it


def test_a_workdir_over_the_limit_is_refused_naming_its_biggest_entries(
    server: ServerProcess, checkout: Path
) -> None:
    result = run(server, checkout, "--max-workdir-size", "100", "--", "python", "train.py", "0")
    assert result.returncode == 1
    assert "over --max-workdir-size" in result.stderr
    assert "train.py" in result.stderr and "data/" in result.stderr
    assert "HTTP" not in result.stderr


def test_a_key_that_may_not_submit_is_told_so_in_one_line_and_nothing_is_sent(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(unique("never sent"))
    with server.admin() as admin:
        answer = admin.post(
            "/api/admin/api-keys", json={"name": unique("reader"), "permissions": ["queue.read"]}
        )
    key = answer.json()["key"]
    result = gpufleet_in(
        tmp_path, "run", "--url", server.url, "--api-key", key, "--", "python", "train.py"
    )
    assert result.returncode == 1, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "queue.submit" in line
    assert "HTTP" not in line and "Traceback" not in result.stderr
    packed = pack(tmp_path, ["train.py"], io.BytesIO())
    with server.admin() as admin:
        assert admin.get(f"/api/workdirs/{packed.digest}").status_code == 404


@pytest.fixture(scope="module")
def s3_server(
    tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str
) -> Iterator[ServerProcess]:
    """An orchestrator whose artifact store, snapshots included, is a bucket (moto)."""
    yield from s3_serving(tmp_path_factory.mktemp("run-orchestrator-s3"), s3_endpoint)


def test_on_s3_the_snapshot_lives_in_the_bucket_and_the_job_runs_from_it(
    s3_server: ServerProcess, s3_endpoint: str, checkout: Path, tmp_path: Path
) -> None:
    agent = WorkerProcess(s3_server, tmp_path, persistent=True, labels={"pool": "s3"})
    agent.start()
    try:
        connect = ("--url", s3_server.url, "--api-key", s3_server.admin_key, "--label", "pool=s3")
        result = gpufleet_in(checkout, "run", *connect, "--wait", "--", "python", "train.py", "3")
        assert result.returncode == 3, result.stdout + result.stderr
        words = (checkout / "data" / "words.txt").read_text().strip()
        assert f"data: {words}" in result.stdout
        with s3_server.admin() as admin:
            digest = admin.get(f"/api/queue/{job_id_of(result)}").json()["config"]["workdir"]
        bucket = s3_server.flags["artifacts"].removeprefix("s3://").split("/")[0]
        listed = httpx.get(f"{s3_endpoint}/{bucket}", params={"list-type": "2"}).text
        assert f"workdirs/{digest.removeprefix('sha256:')}.tar" in listed
        # Not in the data folder: the bucket is the store.
        assert not list(s3_server.data_dir.rglob("*.tar"))
    finally:
        agent.stop()
