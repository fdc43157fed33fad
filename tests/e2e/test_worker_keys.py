"""A job cannot reach its worker's credentials (#31.3), tried by real jobs of a real
`gpufleet worker`: the worker's token is not in its /proc cmdline or environ, whichever way
it was given, and with `--run-as` the job runs as another OS user who can write its folder
and nothing of the worker's."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    PYTHON,
    ServerProcess,
    WorkerProcess,
    job_log_lines,
    job_state,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until

MARKER = "KEYS_TEST_MARKER"
JOB_USER = "gpufleet-test-job"

# Walks up from the job to pid 1 and says, for each ancestor, whether its cmdline or
# environ (as /proc shows them) hold the marker or anything of a worker token.
LOOK_UP = textwrap.dedent(
    """
    import json, os
    seen, pid = {}, os.getppid()
    while pid > 1:
        found = {}
        for part in ("cmdline", "environ"):
            try:
                data = open(f"/proc/{pid}/{part}", "rb").read()
            except OSError as exc:
                found[part] = f"unreadable: {exc.strerror}"
                continue
            found[part] = {
                "token": [w.decode() for w in (b"wt_", b"--worker-token\\0", b"WORKER_TOKEN=")
                          if w in data],
                "marker": b"KEYS_TEST_MARKER=" in data,
            }
        seen[pid] = found
        status = open(f"/proc/{pid}/status").read().split("PPid:")[1]
        pid = int(status.split()[0])
    print("SEEN " + json.dumps(seen), flush=True)
    """
)


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("orchestrator"), None, **{"heartbeat-interval": 0.5}
    )
    server.start()
    yield server
    server.kill(signal.SIGTERM)


def _without_token_option(agent: WorkerProcess) -> None:
    """Give the token in the environment instead of --worker-token."""
    plain = agent.command

    def command() -> list[str]:
        cmd = plain()
        at = cmd.index("--worker-token")
        return cmd[:at] + cmd[at + 2 :]

    agent.command = command  # type: ignore[method-assign]


def _seen(server: ServerProcess, job_id: str) -> dict[int, dict[str, object]]:
    lines = [line for line in job_log_lines(server, job_id) if line.startswith("SEEN ")]
    assert lines, job_log_lines(server, job_id)
    return {int(pid): found for pid, found in json.loads(lines[0][5:]).items()}


@pytest.mark.parametrize("given", ["option", "GPUFLEET_WORKER_TOKEN", "SIMPLETUNER_WORKER_TOKEN"])
def test_a_job_finds_no_token_in_its_workers_cmdline_or_environ(
    orchestrator: ServerProcess, tmp_path: Path, given: str
) -> None:
    tag = {"pool": unique("keys")}
    agent = WorkerProcess(orchestrator, tmp_path, labels=tag)
    agent.env = {**os.environ, MARKER: "1"}
    if given != "option":
        agent.env[given] = agent.token
        _without_token_option(agent)
    try:
        job_id = submit_job(orchestrator, tag, [PYTHON, "-c", LOOK_UP])
        agent.start()
        assert wait_job(orchestrator, job_id, "completed")["exit_code"] == 0
        assert agent.wait() == 0
    finally:
        agent.stop()

    assert agent.proc is not None
    seen = _seen(orchestrator, job_id)
    worker = seen[agent.proc.pid]  # the job's parent: the worker, after its re-exec
    # The job could read the worker's /proc (so this test can fail) and found no token there.
    assert worker["environ"] == {"token": [], "marker": True}, worker
    assert worker["cmdline"] == {"token": [], "marker": False}, worker
    readable = [f for found in seen.values() for f in found.values() if isinstance(f, dict)]
    assert [f["token"] for f in readable] == [[] for _ in readable], seen  # nor any ancestor
    assert agent.token not in "\n".join(job_log_lines(orchestrator, job_id))


def test_the_token_file_option_runs_jobs_and_keeps_the_token_out_of_proc(
    orchestrator: ServerProcess, tmp_path: Path
) -> None:
    tag = {"pool": unique("keys")}
    agent = WorkerProcess(orchestrator, tmp_path, labels=tag)
    token_file = tmp_path / "worker.token"
    token_file.write_text(agent.token + "\n")
    token_file.chmod(0o600)
    agent.env = {**os.environ, MARKER: "1"}
    _without_token_option(agent)
    agent.extra_args = ("--worker-token-file", str(token_file))
    try:
        job_id = submit_job(orchestrator, tag, [PYTHON, "-c", LOOK_UP])
        agent.start()
        assert wait_job(orchestrator, job_id, "completed")["exit_code"] == 0
    finally:
        agent.stop()
    assert agent.proc is not None
    assert _seen(orchestrator, job_id)[agent.proc.pid]["environ"] == {
        "token": [],
        "marker": True,
    }


# ---- --run-as ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def job_user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("--run-as needs root to create a user and to switch to it")
    try:
        return pwd.getpwnam(JOB_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", JOB_USER],
            check=True,
        )
    return pwd.getpwnam(JOB_USER)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder the job user can enter (pytest's own tmp folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="gpufleet-runas-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# What the job tries, as plain shell: the worker's Python is inside /root, closed to it.
RUN_AS_JOB = """
echo "UID $(id -u)"
echo written > "$GPUFLEET_JOB_DIR/mine.txt" && echo "WROTE $(cat "$GPUFLEET_JOB_DIR/mine.txt")"
cat "/proc/$PPID/environ" > /dev/null 2>&1 && echo "ENVIRON read" || echo "ENVIRON denied"
cat "$1" > /dev/null 2>&1 && echo "TOKENFILE read" || echo "TOKENFILE denied"
ls "$2" > /dev/null 2>&1 && echo "WORKDIR listed" || echo "WORKDIR denied"
tr '\\0' ' ' < "/proc/$PPID/cmdline" | grep -q -- "$3" && echo "PARENT worker"
true
"""


def test_run_as_runs_the_job_as_that_user_who_writes_its_folder_and_not_the_workers_files(
    orchestrator: ServerProcess,
    tmp_path: Path,
    job_user: pwd.struct_passwd,
    open_dir: Path,
) -> None:
    tag = {"pool": unique("runas")}
    agent = WorkerProcess(orchestrator, tmp_path, labels=tag)
    agent.work_dir = open_dir / "work"
    token_file = open_dir / "worker.token"
    token_file.write_text(agent.token)
    token_file.chmod(0o600)
    agent.env = {**os.environ, "GPUFLEET_WORKER_RUN_AS": JOB_USER}
    script = ["sh", "-c", RUN_AS_JOB, "job", str(token_file), str(agent.work_dir), agent.name]
    try:
        job_id = submit_job(orchestrator, tag, script)
        agent.start()
        job = wait_job(orchestrator, job_id, "completed", "failed")
    finally:
        agent.stop()

    lines = job_log_lines(orchestrator, job_id)
    assert job["status"] == "completed", (job["error"], lines)
    assert f"UID {job_user.pw_uid}" in lines and job_user.pw_uid != 0
    assert "WROTE written" in lines
    assert "PARENT worker" in lines  # $PPID was the worker: the reads below were of its files
    assert "ENVIRON denied" in lines and "TOKENFILE denied" in lines, lines
    assert "WORKDIR denied" in lines, lines
    folder = agent.work_dir / "jobs" / job_id / job["current_attempt_id"]
    assert folder.stat().st_uid == job_user.pw_uid
    assert (folder / "mine.txt").stat().st_uid == job_user.pw_uid


def test_run_as_runs_a_jobs_setup_as_that_user_in_its_folder_before_the_command(
    orchestrator: ServerProcess,
    tmp_path: Path,
    job_user: pwd.struct_passwd,
    open_dir: Path,
) -> None:
    tag = {"pool": unique("runas-setup")}
    agent = WorkerProcess(orchestrator, tmp_path, labels=tag, extra_args=("--run-as", JOB_USER))
    agent.work_dir = open_dir / "work"
    setup = 'echo "SETUP $(id -u)" > setup.txt'
    try:
        job_id = submit_job(orchestrator, tag, ["cat", "setup.txt"], config={"setup": setup})
        agent.start()
        job = wait_job(orchestrator, job_id, "completed", "failed")
    finally:
        agent.stop()
    lines = job_log_lines(orchestrator, job_id)
    assert job["status"] == "completed", (job["error"], lines)
    assert f"SETUP {job_user.pw_uid}" in lines, lines  # written as the user, read by the job
    folder = agent.work_dir / "jobs" / job_id / job["current_attempt_id"]
    assert (folder / "setup.txt").stat().st_uid == job_user.pw_uid


def test_run_as_is_refused_at_start_for_a_user_that_does_not_exist(
    orchestrator: ServerProcess, tmp_path: Path
) -> None:
    agent = WorkerProcess(orchestrator, tmp_path, extra_args=("--run-as", "no-such-user-x9"))
    done = subprocess.run(agent.command(), capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "--run-as no-such-user-x9" in done.stderr and "no such user" in done.stderr


def test_a_run_as_job_cannot_make_the_worker_read_a_file_only_root_reads(
    orchestrator: ServerProcess,
    tmp_path: Path,
    job_user: pwd.struct_passwd,
    open_dir: Path,
) -> None:
    """The worker (root) reads the job's progress file and uploads its files: a link the job
    puts in their place is followed only to a file inside its folder."""
    tag = {"pool": unique("runas")}
    agent = WorkerProcess(orchestrator, tmp_path, labels=tag, extra_args=("--run-as", JOB_USER))
    agent.work_dir = open_dir / "work"
    secret = open_dir / "root-only.jsonl"
    secret.write_text('{"step": 4242, "total": 5000}\n')
    secret.chmod(0o600)
    gate = open_dir / "read"  # once the worker has read the job's own progress line
    # Then the link to the root-only file, read on the worker's next pass (every second)
    # and again as the job ends.
    steps = """
    cd "$GPUFLEET_JOB_DIR"
    echo '{"step": 7, "total": 10, "padding": "longer than the root-only line"}' > mine.jsonl
    ln -sf mine.jsonl "$GPUFLEET_PROGRESS_FILE"
    while [ ! -e "$2" ]; do sleep 0.05; done
    ln -sf "$1" "$GPUFLEET_PROGRESS_FILE"; mkdir -p output; ln -sf "$1" output/stolen.jsonl
    sleep 1.5
    """
    command = ["sh", "-c", textwrap.dedent(steps), "j", str(secret), str(gate)]
    try:
        job_id = submit_job(orchestrator, tag, command)
        agent.start()
        wait_until(
            lambda: (job_state(orchestrator, job_id)["progress"] or {}).get("step") == 7,
            timeout=20,
            message="the job's own progress line to be read",
        )
        gate.touch()
        job = wait_job(orchestrator, job_id, "completed", "failed")
    finally:
        agent.stop()

    assert job["status"] == "completed", job["error"]
    assert job["progress"]["step"] == 7  # a link inside the folder is read: this could fail
    with orchestrator.admin() as admin:
        files = admin.get(f"/api/queue/{job_id}/artifacts").json()["artifacts"]
    assert [f["path"] for f in files if "stolen" in f["path"]] == []
