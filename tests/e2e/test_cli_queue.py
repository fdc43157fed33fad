"""`gpufleet jobs rerun|cancel ID…`, the queue's filters, and worker names where ids are
asked for (#15, #15.6)."""

from __future__ import annotations

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import ServerProcess, unique
from tests.e2e.test_cli import server

__all__ = ["server"]  # the module's orchestrator, shared with test_cli's fixture


def waiting_job(server: ServerProcess, pool: str) -> str:
    with server.admin() as admin:
        resp = admin.post(
            "/api/queue/submit",
            json={"config": {"command": ["true"]}, "worker_labels": {"pool": pool}},
        )
    assert resp.status_code == 201, resp.text
    job_id: str = resp.json()["id"]
    return job_id


def test_a_worker_is_shown_drained_and_undrained_by_its_name(server: ServerProcess) -> None:
    """#15.6: `gpufleet workers show gpu-worker-1` accepted only ids."""
    name = unique("named")
    worker_id = as_json(gf(server, "workers", "create", name, "--json"))["worker_id"]

    shown = as_json(gf(server, "workers", "show", name, "--json"))
    drained = ok(gf(server, "workers", "drain", name))
    undrained = ok(gf(server, "workers", "undrain", name))

    assert shown["id"] == worker_id
    assert f"Drained worker {worker_id} ({name})" in drained
    assert "takes jobs again" in undrained
    assert worker_id in ok(gf(server, "workers", "rotate-token", name))
    assert f"Deleted worker {worker_id} ({name})" in ok(gf(server, "workers", "delete", name, "-y"))


def test_an_unknown_worker_name_is_one_line_and_an_id_wins_over_a_name(
    server: ServerProcess,
) -> None:
    impostor = as_json(gf(server, "workers", "create", "w_local", "--json"))["worker_id"]

    unknown = one_line_error(gf(server, "workers", "drain", "no-such-worker"))
    shown = as_json(gf(server, "workers", "show", "w_local", "--json"))

    assert "no worker has the id or name 'no-such-worker'" in unknown
    assert "gpufleet workers list" in unknown
    assert shown["name"] == "local"  # the id w_local, not the worker named so
    ok(gf(server, "workers", "delete", impostor, "-y"))


def test_jobs_cancel_and_rerun_take_several_ids_and_say_what_became_of_each(
    server: ServerProcess,
) -> None:
    pool = unique("many")
    first, second = waiting_job(server, pool), waiting_job(server, pool)

    cancelled = ok(gf(server, "jobs", "cancel", first, second))
    again = gf(server, "jobs", "cancel", first, second)
    rerun = ok(gf(server, "jobs", "rerun", first, second))

    assert f"Job {first} is cancelled." in cancelled and f"Job {second} is cancelled." in cancelled
    assert again.returncode == 1 and "already cancelled" in again.stdout
    assert "2 done, 0 not." in rerun
    listed = as_json(gf(server, "jobs", "list", "--label", f"pool={pool}", "--json"))["jobs"]
    assert {j["rerun_of"] for j in listed} == {None, first, second}
    new = next(j["id"] for j in listed if j["rerun_of"] == first)
    assert f"Job {first} re-runs as {new} (queued)." in rerun
    shown = ok(gf(server, "jobs", "show", new))
    assert f"re-run of  {first}" in shown


def test_jobs_list_filters_by_worker_name_and_names_the_worker(server: ServerProcess) -> None:
    with server.admin() as admin:
        resp = admin.post(
            "/api/queue/submit", json={"config": {"command": ["true"]}, "target": "local"}
        )
    job_id = resp.json()["id"]

    listed = as_json(gf(server, "jobs", "list", "--worker", "local", "--id", job_id, "--json"))
    table = ok(gf(server, "jobs", "list", "--id", job_id))

    assert [j["id"] for j in listed["jobs"]] == [job_id]
    row = next(line for line in table.splitlines() if line.startswith(job_id))
    assert row.split()[4] == "local"
    assert "by admin (key:" in ok(gf(server, "jobs", "show", job_id))


def test_rerunning_one_job_names_the_new_one_and_an_unknown_one_is_one_line(
    server: ServerProcess,
) -> None:
    job_id = waiting_job(server, unique("one"))
    ok(gf(server, "jobs", "cancel", job_id))

    out = ok(gf(server, "jobs", "rerun", job_id))
    still = one_line_error(gf(server, "jobs", "rerun", out.split()[4]))

    assert out.startswith(f"Job {job_id} re-runs as j_") and "gpufleet jobs watch j_" in out
    assert "cancel it first" in still
    assert "no job j_nope" in one_line_error(gf(server, "jobs", "rerun", "j_nope"))


def test_workers_label_sets_admin_labels_that_win_and_none_removes_them(
    server: ServerProcess,
) -> None:
    name = unique("labelled")
    worker_id = as_json(gf(server, "workers", "create", name, "--label", "pool=red", "--json"))[
        "worker_id"
    ]

    said = ok(gf(server, "workers", "label", name, "pool=blue", "zone=b"))
    with server.admin() as admin:
        after = admin.get(f"/api/admin/workers/{worker_id}").json()
    bad = gf(server, "workers", "label", name, "no-equals-sign")
    cleared = as_json(gf(server, "workers", "label", name, "--json"))

    assert f"Worker {worker_id} ({name}): admin labels pool=blue, zone=b" in said
    assert after["admin_labels"] == {"pool": "blue", "zone": "b"}
    assert after["labels"]["pool"] == "blue"  # the admin's label wins the clash
    assert bad.returncode == 2  # a usage error, as for --label
    assert "'no-equals-sign' is not key=value" in bad.stderr
    assert cleared["admin_labels"] == {}
    with server.admin() as admin:
        events = admin.get("/api/audit", params={"type": "worker.labels_set"}).json()
    assert sum(e["target"] == worker_id for e in events["events"]) == 2
    ok(gf(server, "workers", "delete", name, "-y"))
