"""The operator CLI (`gpufleet workers|configs|jobs|audit`) against a real orchestrator with its
embedded local runner: in the test's process through the command's entry point
(tests/e2e/commands.py), and as the installed command where the process is the point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from gpufleet.cli.api import ApiClient
from gpufleet.cli.main import cli
from tests.e2e.commands import (
    as_json,
    gf,
    gpufleet,
    gpufleet_process,
    ok,
    one_line_error,
    server_env,
)
from tests.e2e.conftest import GPUFLEET, ServerProcess, free_port, job_state, unique
from tests.waiting import wait_until

PY = sys.executable


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Workers these tests create never heartbeat: a long timeout keeps them from going offline.
    flags = {"local-gpus": "auto", "heartbeat-timeout": 120}
    proc = ServerProcess(tmp_path_factory.mktemp("cli"), None, **flags)
    proc.start()
    with proc.admin() as admin:
        wait_until(
            lambda: admin.get("/api/admin/workers/w_local").json().get("status") == "idle",
            timeout=15,
            message="the local runner to be idle",
        )
    yield proc
    proc.kill(signal.SIGTERM)


def job_file(tmp_path: Path, code: str, name: str = "job.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"command": [PY, "-c", code]}))
    return path


def submit_local(server: ServerProcess, tmp_path: Path, code: str, *extra: str) -> str:
    body = as_json(
        gf(
            server,
            "jobs",
            "submit",
            str(job_file(tmp_path, code)),
            "--target",
            "local",
            "--json",
            *extra,
        )
    )
    return str(body["id"])


def operator_commands() -> list[tuple[str, ...]]:
    found = []
    for name in ("workers", "configs", "jobs"):
        group = cli.get_command(click.Context(cli), name)
        assert isinstance(group, click.Group)
        found += [(name, sub) for sub in group.commands]
    return [*found, ("audit",)]


# ---- help -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", operator_commands(), ids=" ".join)
def test_every_operator_command_shows_its_options_and_environment_variables_in_help(
    path: tuple[str, ...],
) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("--url", "GPUFLEET_URL", "--api-key", "GPUFLEET_API_KEY", "GPUFLEET_DATA_DIR"):
        assert text in result.output


def test_the_installed_command_prints_help_for_jobs_submit_with_its_options() -> None:
    out = ok(gpufleet_process("jobs", "submit", "--help", env=server_env(None)))
    for option in ("--target", "--label", "--gpus", "--priority", "--max-retries", "--json"):
        assert option in out
    assert "GPUFLEET_API_KEY" in out


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (("--version",), None),
        (("jobs", "frobnicate"), None),  # a usage error: exit code 2
        (("jobs", "list", "--url", "http://127.0.0.1:9"), None),  # one line, exit code 1
        (("workers", "delete", "{worker}"), "n\n"),  # a question answered: Aborted!
        (("workers", "list", "--status", "offline"), None),  # a table, as wide
    ],
    ids=["version", "usage", "unreachable", "question", "table"],
)
def test_a_command_run_in_the_tests_process_answers_as_the_installed_command(
    server: ServerProcess, argv: tuple[str, ...], answer: str | None
) -> None:
    """What the other tests rely on (tests/e2e/commands.py): the same exit code, stdout and
    stderr as the installed command's process."""
    with server.admin() as admin:
        created = admin.post("/api/admin/workers", json={"name": unique("asked")})
    worker = created.json()["worker_id"]
    argv = tuple(arg.format(worker=worker) for arg in argv)
    env = server_env(server)
    here = gpufleet(*argv, env=env, input=answer)
    there = gpufleet_process(*argv, env=env, input=answer)
    assert (here.returncode, here.stdout, here.stderr) == (
        there.returncode,
        there.stdout,
        there.stderr,
    )


def test_an_exception_nothing_caught_fails_the_command_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the interpreter reports it: `one_line_error` must see what a process would show."""
    monkeypatch.setattr(f"{ApiClient.__module__}.ApiClient.__enter__", lambda self: 1 / 0)
    result = gpufleet("jobs", "list", "--url", "http://127.0.0.1:9", "--api-key", "k", env={})
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


# ---- workers ----------------------------------------------------------------------------


def test_workers_list_shows_the_local_runner_in_a_table_and_as_json(
    server: ServerProcess,
) -> None:
    table = ok(gf(server, "workers", "list"))
    row = next(line for line in table.splitlines() if line.startswith("w_local"))
    assert row.split()[:3] == ["w_local", "local", "idle"]
    body = as_json(gf(server, "workers", "list", "--json", "--status", "idle"))
    assert [w["id"] for w in body["workers"]] == ["w_local"]
    assert body["counts"]["idle"] == 1


def test_workers_create_prints_the_token_once_and_a_command_that_starts_the_worker(
    server: ServerProcess,
) -> None:
    name = unique("gpu")
    out = ok(gf(server, "workers", "create", name, "--label", "gpu_type=a100"))
    token = next(w for w in out.split() if w.startswith("wt_"))
    assert out.count(token) == 3  # the token, the command, the command with the server's copy
    assert (
        f"gpufleet worker --orchestrator-url {server.url} --worker-token {token} "
        f"--name {name} --persistent" in out
    )
    with httpx.Client(base_url=server.url, headers={"X-Worker-Token": token}) as worker:
        resp = worker.post("/api/workers/register", json={"name": name, "gpu_count": 1})
    assert resp.status_code == 200 and resp.json()["labels"]["gpu_type"] == "a100"


def test_an_ephemeral_worker_command_has_no_persistent_flag(server: ServerProcess) -> None:
    body = as_json(gf(server, "workers", "create", unique("eph"), "--type", "ephemeral", "--json"))
    assert body["token"].startswith("wt_")
    out = ok(gf(server, "workers", "create", unique("eph"), "--type", "ephemeral"))
    assert "gpufleet worker --orchestrator-url" in out and "--persistent" not in out


def test_drain_and_undrain_move_a_worker_out_of_dispatch_and_back(server: ServerProcess) -> None:
    worker_id = as_json(gf(server, "workers", "create", unique("d"), "--json"))["worker_id"]
    assert "Drained worker" in ok(gf(server, "workers", "drain", worker_id))
    shown = as_json(gf(server, "workers", "show", worker_id, "--json"))
    assert shown["status"] == "draining" and shown["drained"] is True
    assert "takes jobs again" in ok(gf(server, "workers", "undrain", worker_id))
    with server.admin() as admin:
        assert admin.get(f"/api/admin/workers/{worker_id}").json()["drained"] is False


def test_rotate_token_prints_a_new_token_and_the_old_one_is_refused(
    server: ServerProcess,
) -> None:
    created = as_json(gf(server, "workers", "create", unique("r"), "--json"))
    out = ok(gf(server, "workers", "rotate-token", created["worker_id"]))
    new = next(w for w in out.split() if w.startswith("wt_"))
    assert new != created["token"]
    for token, status in ((created["token"], 401), (new, 200)):
        resp = httpx.post(
            f"{server.url}/api/workers/register",
            headers={"X-Worker-Token": token},
            json={"name": "r"},
        )
        assert resp.status_code == status, (token, resp.text)


def test_workers_delete_asks_first_and_deletes_an_offline_worker(server: ServerProcess) -> None:
    created = as_json(gf(server, "workers", "create", unique("gone"), "--json"))
    worker_id = created["worker_id"]
    with httpx.Client(base_url=server.url, headers={"X-Worker-Token": created["token"]}) as w:
        assert w.post("/api/workers/register", json={"name": "gone"}).status_code == 200
        assert w.post("/api/workers/disconnect", json={}).status_code == 200
    refused = gf(server, "workers", "delete", worker_id, input="n\n")
    assert refused.returncode == 1 and "Aborted" in refused.stderr
    assert "Deleted worker" in ok(gf(server, "workers", "delete", worker_id, input="y\n"))
    with server.admin() as admin:
        assert admin.get(f"/api/admin/workers/{worker_id}").status_code == 404


def test_deleting_a_live_worker_is_refused_in_one_line(server: ServerProcess) -> None:
    error = one_line_error(gf(server, "workers", "delete", "w_local", "--yes"))
    assert "offline" in error


# ---- configs ----------------------------------------------------------------------------


def test_configs_put_list_show_and_delete_round_trip(server: ServerProcess, tmp_path: Path) -> None:
    name = unique("cfg")
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"command": ["python", "train.py"], "gpu_count": 0}))
    assert f"Stored config {name}" in ok(gf(server, "configs", "put", str(path), "--name", name))
    row = next(line for line in ok(gf(server, "configs", "list")).splitlines() if name in line)
    assert "python train.py" in row
    assert as_json(gf(server, "configs", "show", name)) == {
        "command": ["python", "train.py"],
        "gpu_count": 0,
    }
    ok(gf(server, "configs", "delete", name))
    assert "no config" in one_line_error(gf(server, "configs", "show", name))


def test_configs_put_names_the_config_after_the_file(server: ServerProcess, tmp_path: Path) -> None:
    name = unique("stem")
    (tmp_path / f"{name}.json").write_text('{"command": ["true"]}')
    ok(gf(server, "configs", "put", str(tmp_path / f"{name}.json")))
    listed = as_json(gf(server, "configs", "list", "--json"))
    assert {"name": name, "config": {"command": ["true"]}}.items() <= next(
        c for c in listed["configs"] if c["name"] == name
    ).items()


# ---- jobs -------------------------------------------------------------------------------


def test_jobs_submit_by_name_sends_labels_gpus_priority_and_retries(
    server: ServerProcess, tmp_path: Path
) -> None:
    name = unique("named")
    worker = unique("big")
    path = job_file(tmp_path, "print(1)")
    ok(gf(server, "configs", "put", str(path), "--name", name))
    created = as_json(
        gf(server, "workers", "create", worker, "--label", "gpu_type=a100-80g", "--json")
    )
    httpx.post(  # two GPUs, so a 2-GPU job can run some day; its stream stays closed
        f"{server.url}/api/workers/register",
        headers={"X-Worker-Token": created["token"]},
        json={"name": worker, "gpu_count": 2, "features": ["command", "attempts"]},
    ).raise_for_status()
    out = ok(
        gf(
            server,
            *("jobs", "submit", name, "--label", "gpu_type=a100*", "--gpus", "2"),
            *("--priority", "7", "--max-retries", "0"),
        )
    )
    job_id = next(w for w in out.split() if w.startswith("j_"))
    with server.admin() as admin:
        shown = admin.get(f"/api/queue/{job_id}").json()
    assert shown["config_name"] == name and shown["target"] == "worker"
    assert shown["worker_labels"] == {"gpu_type": "a100*"}
    assert (shown["gpu_count"], shown["priority"], shown["max_retries"]) == (2, 7, 0)
    text = ok(gf(server, "jobs", "show", job_id))
    assert "waiting: every worker that could run it is busy" in text
    assert f"{worker} (connecting)" in text
    assert f"Job {job_id} is cancelled" in ok(gf(server, "jobs", "cancel", job_id))


def test_jobs_list_filters_by_status_and_prints_json_for_scripts(
    server: ServerProcess, tmp_path: Path
) -> None:
    job_id = submit_local(server, tmp_path, "print('listed')")
    with server.admin() as admin:
        wait_until(
            lambda: admin.get(f"/api/queue/{job_id}").json()["status"] == "completed",
            timeout=15,
            message="the job to complete",
        )
    body = as_json(gf(server, "jobs", "list", "--status", "completed", "--json"))
    assert job_id in [j["id"] for j in body["jobs"]]
    assert {j["status"] for j in body["jobs"]} == {"completed"}
    table = ok(gf(server, "jobs", "list", "--target", "local"))
    row = next(line for line in table.splitlines() if line.startswith(job_id))
    assert row.split()[1:4] == ["completed", "(inline)", "local"]


def test_jobs_watch_shows_progress_and_ends_with_the_result_and_exit_code_0(
    server: ServerProcess, tmp_path: Path
) -> None:
    code = (
        "import time\nfrom gpufleet.progress import report\n"
        "for i in range(1, 11):\n    report(step=i, total=10, loss=1 / i)\n    time.sleep(0.05)\n"
    )
    job_id = submit_local(server, tmp_path, code)
    result = gf(server, "jobs", "watch", job_id)
    out = ok(result)
    assert "10/10" in out and "loss=0.1" in out
    assert out.strip().splitlines()[-1].startswith(f"Job {job_id} completed: exit code 0")


def test_jobs_watch_exits_1_with_the_error_of_a_failed_job(
    server: ServerProcess, tmp_path: Path
) -> None:
    job_id = submit_local(
        server, tmp_path, "print('about to fail'); raise SystemExit(3)", "--max-retries", "0"
    )
    result = gf(server, "jobs", "watch", job_id)
    assert result.returncode == 1, result.stderr
    assert f"Job {job_id} failed: exit code 3" in result.stdout
    assert "Error: exited with code 3" in result.stdout and "about to fail" in result.stdout


def test_jobs_logs_follow_prints_lines_as_they_come_until_the_job_ends(
    server: ServerProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    code = (
        "import pathlib, time\n"
        "print('line 0', flush=True)\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)\n"
        "for i in range(1, 5): print('line', i, flush=True)\n"
    )
    job_id = submit_local(server, tmp_path, code)
    env = {**os.environ, "GPUFLEET_URL": server.url, "GPUFLEET_API_KEY": server.admin_key}
    with subprocess.Popen(
        [GPUFLEET, "jobs", "logs", job_id, "-f"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follow:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "line 0\n"  # printed while the job still waits
        gate.touch()
        rest, errors = follow.communicate(timeout=30)
    assert follow.returncode == 0, errors
    assert f"Job {job_id} completed." in errors
    followed = "line 0\n" + rest
    stored = ok(gf(server, "jobs", "logs", job_id))
    assert followed == stored
    # dict.fromkeys: log shipping is at-least-once, so a batch may be stored twice
    assert list(dict.fromkeys(stored.splitlines())) == [f"line {i}" for i in range(5)]
    as_lines = ok(gf(server, "jobs", "logs", job_id, "--json")).splitlines()
    records = [json.loads(line) for line in as_lines]
    assert [r["text"] for r in records] == stored.splitlines()
    assert [r["seq"] for r in records] == sorted({r["seq"] for r in records})


RAW_CONTROLS = ("\x1b", "\x9b", "\x07", "\x7f", "\x08")


def test_job_output_reaches_the_terminal_with_its_control_characters_escaped(
    server: ServerProcess, tmp_path: Path
) -> None:
    shout = r"print('\x1b]0;pwned\x07\x1b[31mred\x1b[0m [bold]loud[/bold] \x9b2J\x7f\x08over')"
    job_id = submit_local(server, tmp_path, f"{shout}\nraise SystemExit(2)", "--max-retries", "0")
    wait_until(
        lambda: job_state(server, job_id)["status"] == "failed",
        timeout=15,
        message="the job to fail",
    )

    printed = {
        "logs": ok(gf(server, "jobs", "logs", job_id)),
        "logs --json": ok(gf(server, "jobs", "logs", job_id, "--json")),
        "show": ok(gf(server, "jobs", "show", job_id)),
        "watch": gf(server, "jobs", "watch", job_id).stdout,
    }

    for command, text in printed.items():
        assert not [c for c in RAW_CONTROLS if c in text], f"jobs {command}: {text!r}"
    for command in ("logs", "show", "watch"):
        assert r"\x1b[31mred\x1b[0m [bold]loud[/bold] \x9b2J\x7f\x08over" in printed[command]
    with server.admin() as admin:  # stored and served as the job printed it
        (line,) = admin.get(f"/api/queue/{job_id}/logs").json()["lines"]
    assert line["text"].startswith("\x1b]0;pwned\x07\x1b[31mred")


# ---- audit ------------------------------------------------------------------------------


def test_audit_filters_by_type_and_time_in_a_table_and_as_json(server: ServerProcess) -> None:
    name = unique("audited")
    worker_id = as_json(gf(server, "workers", "create", name, "--json"))["worker_id"]
    body = as_json(gf(server, "audit", "--type", "worker.", "--since", "5m", "--json"))
    assert body["events"] and all(e["event_type"].startswith("worker.") for e in body["events"])
    assert worker_id in [e["target"] for e in body["events"]]
    table = ok(gf(server, "audit", "--target", worker_id))
    assert "worker.created" in table and worker_id in table
    future = as_json(gf(server, "audit", "--since", "2999-01-01T00:00", "--json"))
    assert future["events"] == []


# ---- credentials and errors -------------------------------------------------------------


def test_the_admin_key_is_read_from_the_data_dir_when_none_is_given(
    server: ServerProcess,
) -> None:
    result = gf(
        None, "workers", "list", "--json", "--url", server.url, "--data-dir", str(server.data_dir)
    )
    assert "w_local" in [w["id"] for w in json.loads(ok(result))["workers"]]


def test_a_server_that_is_down_is_one_line_naming_the_url(server: ServerProcess) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    error = one_line_error(gf(None, "jobs", "list", "--url", url, "--api-key", "k"))
    assert f"cannot reach the orchestrator at {url}" in error and "GPUFLEET_URL" in error


def test_a_refused_key_is_one_line_saying_where_the_admin_key_is(server: ServerProcess) -> None:
    error = one_line_error(gf(server, "workers", "list", key="not-a-key"))
    assert "refused the API key" in error and "admin.token" in error


def test_no_key_at_all_is_one_line_naming_the_flag_and_variable(
    server: ServerProcess, tmp_path: Path
) -> None:
    error = one_line_error(
        gf(None, "jobs", "list", "--url", server.url, "--data-dir", str(tmp_path))
    )
    assert "--api-key" in error and "GPUFLEET_API_KEY" in error


def test_an_unknown_job_is_one_line_from_every_job_command(server: ServerProcess) -> None:
    for command in ("show", "cancel", "watch"):
        assert "no job j_nope" in one_line_error(gf(server, "jobs", command, "j_nope"))
    assert "no job j_nope" in one_line_error(gf(server, "jobs", "logs", "j_nope", "-f"))


def test_an_invalid_config_file_is_one_line_and_nothing_is_submitted(
    server: ServerProcess, tmp_path: Path
) -> None:
    with server.admin() as admin:
        before = admin.get("/api/queue").json()["total"]
    broken = tmp_path / "broken.json"
    broken.write_text('{"command": [')
    assert "is not valid JSON" in one_line_error(gf(server, "jobs", "submit", str(broken)))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "not an object" in one_line_error(gf(server, "configs", "put", str(listed)))
    with server.admin() as admin:
        assert admin.get("/api/queue").json()["total"] == before


def test_gpus_other_than_the_configs_own_count_is_one_line_naming_both_and_nothing_is_submitted(
    server: ServerProcess, tmp_path: Path
) -> None:
    with server.admin() as admin:
        before = admin.get("/api/queue").json()["total"]
    config = tmp_path / "eight.json"
    config.write_text(json.dumps({"num_processes": 8, "model_type": "lora"}))

    line = one_line_error(gf(server, "jobs", "submit", str(config), "--gpus", "0"))

    assert "--gpus 0 disagrees with the config's own GPU count, 'num_processes' (8)" in line
    assert "run it with --gpus 8, or without --gpus" in line
    with server.admin() as admin:
        assert admin.get("/api/queue").json()["total"] == before


def test_a_job_no_worker_can_run_yet_is_queued_and_submit_says_what_it_waits_for(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = ok(
        gf(
            server,
            *("jobs", "submit", str(job_file(tmp_path, "0"))),
            *("--label", "zone=mars", "--gpus", "2"),
        )
    )
    job_id = next(w for w in out.split() if w.startswith("j_"))
    assert f"Submitted job {job_id} (queued, target worker)." in out
    wanted = "no remote worker registered has 2 GPUs and zone=mars and runs commands; "
    assert f"Waiting: {wanted}" in out
    assert f"waiting: {wanted}" in ok(gf(server, "jobs", "show", job_id))
    assert f"Job {job_id} is cancelled" in ok(gf(server, "jobs", "cancel", job_id))


def test_jobs_submit_with_an_idempotency_key_twice_makes_one_job_and_says_so(
    server: ServerProcess, tmp_path: Path
) -> None:
    key = unique("ci-build")
    submit = ("jobs", "submit", str(job_file(tmp_path, "0")), "--label", "zone=venus")
    first = ok(gf(server, *submit, "--idempotency-key", key))
    job_id = next(w for w in first.split() if w.startswith("j_"))
    again = ok(gf(server, *submit, "--idempotency-key", key))
    assert f"Job {job_id} was submitted already with this idempotency key (queued" in again
    other = as_json(gf(server, *submit, "--idempotency-key", key + "-2", "--json"))
    assert other["id"] != job_id and other["idempotent_hit"] is False
    for done in (job_id, other["id"]):
        ok(gf(server, "jobs", "cancel", done))


def test_workers_list_names_the_queued_jobs_no_worker_can_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = ok(
        gf(
            server,
            *("jobs", "submit", str(job_file(tmp_path, "0"))),
            *("--label", "zone=venus", "--priority", "1000"),  # at the head of the queue
        )
    )
    job_id = next(w for w in out.split() if w.startswith("j_"))
    listed = ok(gf(server, "workers", "list"))
    assert f"Job {job_id} waits: no remote worker registered has zone=venus and runs " in listed
    ok(gf(server, "jobs", "cancel", job_id))
    assert job_id not in ok(gf(server, "workers", "list"))
