"""The CLI's advice names commands and flags, never endpoints (#15.7)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_cli import job_file, server

__all__ = ["server"]  # the module's orchestrator, shared with test_cli's fixture


def test_submitting_a_file_that_does_not_exist_says_so_in_cli_terms(
    server: ServerProcess, tmp_path: Path
) -> None:
    error = one_line_error(gf(server, "jobs", "submit", "missing.json"))

    assert "there is no file missing.json" in error
    assert "no stored config named 'missing.json'" in error
    assert "gpufleet configs list" in error
    assert "/api/" not in error


def test_a_path_that_cannot_name_a_stored_config_is_only_said_not_to_exist(
    server: ServerProcess, tmp_path: Path
) -> None:
    missing = tmp_path / "nested" / "missing.json"

    error = one_line_error(gf(server, "jobs", "submit", str(missing)))

    assert f"there is no file {missing}" in error
    assert "no stored config named" not in error
    assert "/api/" not in error


def test_a_local_job_wanting_more_gpus_than_the_local_runner_is_refused_and_told_to_lower_gpus(
    server: ServerProcess, tmp_path: Path
) -> None:
    # It would wait forever, so it is refused (#33.7), in the CLI's terms.
    error = one_line_error(
        gf(
            server,
            "jobs",
            "submit",
            str(job_file(tmp_path, "0")),
            "--target",
            "local",
            "--gpus",
            "2",
        )
    )

    assert "the local runner has " in error
    assert "submit again with --gpus " in error and "--target worker" in error
    assert "create" not in error.lower()
    assert "/api/" not in error


def test_a_job_no_worker_matches_is_told_which_command_creates_one(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = ok(gf(server, "jobs", "submit", str(job_file(tmp_path, "0")), "--label", "zone=moon"))
    job_id = next(w for w in out.split() if w.startswith("j_"))

    assert "`gpufleet workers create NAME --label KEY=VALUE`" in out
    assert "/api/" not in out
    assert "/api/" not in ok(gf(server, "jobs", "show", job_id))
    assert "/api/" not in ok(gf(server, "workers", "list"))
    ok(gf(server, "jobs", "cancel", job_id))


def test_an_unknown_job_is_pointed_at_gpufleet_jobs_list(server: ServerProcess) -> None:
    error = one_line_error(gf(server, "jobs", "show", "j_nope"))

    assert "no job j_nope" in error
    assert "gpufleet jobs list" in error
    assert "/api/" not in error


def test_audit_takes_a_key_name_as_actor_shows_names_and_says_when_no_one_has_it(
    server: ServerProcess,
) -> None:
    ok(gf(server, "workers", "create", "audited-by-name"))

    table = ok(gf(server, "audit", "--actor", "admin", "--type", "worker.created"))
    assert "audited-by-name" in table and " admin " in table
    assert "key:k_" not in table

    none = ok(gf(server, "audit", "--actor", "nobody"))
    assert "No audit events match. No key, worker or user named 'nobody'" in none


def test_audit_user_shows_a_users_keys_events_in_a_user_column(
    server: ServerProcess, tmp_path: Path
) -> None:
    ok(gf(server, "users", "create", "cli-rita", "--level", "researcher"))
    create = ("keys", "create", "rita-cli", "-p", "queue.submit", "-p", "queue.read", "--user")
    create += ("cli-rita",)
    made = as_json(gf(server, *create, "--json"))
    ok(gf(server, "jobs", "submit", str(job_file(tmp_path, "pass")), key=made["key"]))

    table = ok(gf(server, "audit", "--user", "cli-rita"))
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["TIME", "TYPE", "ACTOR", "USER", "TARGET"]
    assert "job.submitted" in row and "rita-cli" in row and "cli-rita" in row


def test_a_worker_started_without_a_token_is_told_which_command_makes_one() -> None:
    result = gf(None, "worker", "--orchestrator-url", "http://127.0.0.1:9")

    assert result.returncode != 0
    assert "gpufleet workers create NAME" in result.stderr, result.stderr
    assert "/api/" not in result.stderr
