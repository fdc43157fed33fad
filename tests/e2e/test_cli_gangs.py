"""`--nodes` and `--same-label` (multi-node jobs, #35) on `jobs submit` and `run`, and a
worker held for a gang as `workers list` and `workers show` print it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import FakeWorker, ServerProcess, serving, unique
from tests.e2e.test_cli import as_json, gf, job_file, ok, one_line_error
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
