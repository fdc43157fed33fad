"""`--nodes` and `--same-label` (multi-node jobs, #35) on `jobs submit` and `run`, and a
worker held for a gang as `workers list` and `workers show` print it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import GPUFLEET, FakeWorker, ServerProcess, serving, unique
from tests.e2e.fake_gang import running_gang
from tests.e2e.test_cli import job_file
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("gangs"), **{"heartbeat-timeout": 120})


def test_jobs_submit_puts_nodes_and_same_label_in_the_config(
    server: ServerProcess, tmp_path: Path
) -> None:
    path = job_file(tmp_path, "print(1)")

    job = as_json(
        gf(server, "jobs", "submit", str(path), "--nodes", "3", "--same-label", "zone", "--json")
    )

    with server.admin() as admin:
        shown = admin.get(f"/api/queue/{job['id']}").json()
    assert shown["config"]["nodes"] == 3 and shown["config"]["same_label"] == "zone"
    assert (shown["nodes"], shown["status"]) == (3, "queued")
    text = ok(gf(server, "jobs", "show", job["id"]))
    assert "waiting for 3 workers that run multi-node jobs (feature gang)" in text
    assert "or submit again with fewer --nodes" in text  # the advice in CLI terms
    ok(gf(server, "jobs", "cancel", job["id"]))


def test_nodes_the_config_contradicts_are_refused_in_cli_terms(
    server: ServerProcess, tmp_path: Path
) -> None:
    path = tmp_path / "four.json"
    path.write_text(json.dumps({"command": ["true"], "nodes": 4}))

    line = one_line_error(gf(server, "jobs", "submit", str(path), "--nodes", "2"))

    assert "--nodes 2 disagrees with the config's own 'nodes' (4)" in line
    assert "run it with --nodes 4" in line and "HTTP" not in line


def test_nodes_on_a_stored_config_say_to_set_them_in_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    name = unique("stored")
    ok(gf(server, "configs", "put", str(job_file(tmp_path, "print(1)")), "--name", name))

    line = one_line_error(gf(server, "jobs", "submit", name, "--nodes", "2"))

    assert "--nodes set fields of the config" in line and "gpufleet configs put" in line


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--nodes", "65"), "65 is not in the range 1<=x<=64"),
        (("--nodes", "0"), "0 is not in the range 1<=x<=64"),
        (("--same-label", "no spaces"), "'no spaces' is not a label name"),
    ],
)
def test_bad_nodes_or_labels_are_refused_before_anything_is_sent(
    server: ServerProcess, tmp_path: Path, flags: tuple[str, ...], said: str
) -> None:
    for command in (("jobs", "submit", str(job_file(tmp_path, "print(1)"))), ("run",)):
        result = gf(server, *command, *flags, *(("--", "true") if command == ("run",) else ()))
        assert result.returncode == 2, result.stderr
        assert said in result.stderr


def test_workers_list_and_show_say_a_worker_is_held_for_a_gang(
    server: ServerProcess, tmp_path: Path
) -> None:
    worker = FakeWorker(server, unique("held"))
    worker.register(features=["command", "attempts", "gang"])
    worker.connect()
    try:
        job = as_json(
            gf(
                server,
                "jobs",
                "submit",
                str(job_file(tmp_path, "print(1)")),
                "--nodes",
                "2",
                "--json",
            )
        )
        note = f"held for job {job['id']} (1 of 2 nodes)"

        wait_until(
            lambda: note in ok(gf(server, "workers", "list")),
            timeout=10,
            message="the held worker in the list",
        )
        shown = ok(gf(server, "workers", "show", worker.id))
        held = next(line for line in shown.splitlines() if line.startswith("held "))
        assert held.split(None, 1)[1].startswith(f"{note}, since ")
    finally:
        worker.close()
        ok(gf(server, "jobs", "cancel", job["id"]))


def test_jobs_logs_reads_a_gangs_nodes_together_or_one_node_with_node(
    server: ServerProcess,
) -> None:
    gang = running_gang(server)
    try:
        for rank, text in ((0, "n0 a"), (1, "n1 a"), (0, "n0 b"), (1, "n1 b")):
            gang.say(rank, text)

        assert ok(gf(server, "jobs", "logs", gang.job_id, "--node", "1")).splitlines() == [
            "n1 a",
            "n1 b",
        ]
        assert ok(gf(server, "jobs", "logs", gang.job_id)).splitlines() == [
            "[node 0] n0 a",
            "[node 1] n1 a",
            "[node 0] n0 b",
            "[node 1] n1 b",
        ]
        records = [
            json.loads(line)
            for line in ok(gf(server, "jobs", "logs", gang.job_id, "--json")).splitlines()
        ]
        assert [r["node"] for r in records] == [0, 1, 0, 1]

        # Followed, one node's lines only, until the job ends.
        following = subprocess.Popen(
            [GPUFLEET, "jobs", "logs", gang.job_id, "--node", "1", "-f"],
            env=cli_env(server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        gang.say(0, "n0 live")
        gang.say(1, "n1 live")
        gang.finish()
        stdout, stderr = following.communicate(timeout=30)
        assert following.returncode == 0, stderr
        assert stdout.splitlines() == ["n1 a", "n1 b", "n1 live"]
        assert f"Job {gang.job_id} completed." in stderr
    finally:
        gang.close()


def test_jobs_logs_refuses_a_node_the_job_lacks_in_cli_terms(server: ServerProcess) -> None:
    gang = running_gang(server)
    try:
        result = gf(server, "jobs", "logs", gang.job_id, "--node", "2")

        assert result.returncode == 2
        assert "--node" in result.stderr and "runs on 2 nodes: give 0 to 1" in result.stderr
        assert "Traceback" not in result.stderr and "422" not in result.stderr
        negative = gf(server, "jobs", "logs", gang.job_id, "--node", "-1")
        assert negative.returncode == 2 and "--node" in negative.stderr
    finally:
        gang.finish()
        gang.close()


def cli_env(server: ServerProcess) -> dict[str, str]:
    """What `gf` runs the CLI with, for one run in the background."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(NO_COLOR="1", GPUFLEET_URL=server.url, GPUFLEET_API_KEY=server.admin_key)
    return env
