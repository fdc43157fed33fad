"""`gpufleet users`, `gpufleet teams` and `gpufleet keys create --user` as a subprocess
against a real orchestrator (#18)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import ServerProcess, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("cli-people"), None)


def test_teams_and_users_round_trip_through_the_cli(server: ServerProcess) -> None:
    assert "Created team nlp" in ok(gf(server, "teams", "create", "nlp", "--weight", "2"))
    ok(gf(server, "teams", "create", "cv", "--max-gpus", "8", "--preemptible"))
    created = ok(gf(server, "users", "create", "alice", "--level", "researcher", "--team", "nlp"))
    assert "Created user alice" in created and "--user alice" in created
    assert "alice" in ok(gf(server, "teams", "add", "cv", "alice"))

    ok(gf(server, "users", "update", "alice", "--default-team", "cv", "--max-queued", "20"))
    alice = as_json(gf(server, "users", "show", "alice", "--json"))
    assert alice["teams"] == ["cv", "nlp"] and alice["default_team"] == "cv"
    assert alice["max_queued"] == 20
    ok(gf(server, "users", "update", "alice", "--max-queued", "none"))
    assert as_json(gf(server, "users", "show", "alice", "--json"))["max_queued"] is None

    listed = ok(gf(server, "users", "list"))
    assert "alice" in listed and "researcher" in listed and "cv, nlp" in listed
    teams = ok(gf(server, "teams", "list"))
    assert "nlp" in teams and "preemptible" in teams and "gpus≤8" in teams
    shown = ok(gf(server, "teams", "show", "nlp"))
    assert "weight" in shown and "alice" in shown

    ok(gf(server, "teams", "update", "cv", "--no-preemptible", "--weight", "3"))
    cv = as_json(gf(server, "teams", "show", "cv", "--json"))
    assert cv["preemptible"] is False and cv["weight"] == 3

    ok(gf(server, "teams", "update", "nlp", "--rename", "language"))
    ok(gf(server, "users", "update", "alice", "--rename", "alicia"))
    alicia = as_json(gf(server, "users", "show", "alicia", "--json"))
    assert alicia["teams"] == ["cv", "language"] and alicia["default_team"] == "cv"
    taken = one_line_error(gf(server, "teams", "update", "cv", "--rename", "language"))
    assert "a team named 'language' exists already" in taken

    assert "none" in ok(gf(server, "teams", "remove", "cv", "alicia"))
    ok(gf(server, "teams", "delete", "cv", "--yes"))
    listed = as_json(gf(server, "teams", "list", "--json"))["teams"]
    assert [t["name"] for t in listed] == ["language"]


def test_a_key_for_a_user_is_capped_by_their_level_and_dies_with_them(
    server: ServerProcess,
) -> None:
    ok(gf(server, "users", "create", "vic", "--level", "viewer"))
    refused = one_line_error(gf(server, "keys", "create", "vic-admin", "-p", "*", "--user", "vic"))
    assert "vic is at level viewer" in refused and "queue.read, queue.submit" in refused

    created = ok(gf(server, "keys", "create", "vic-key", "-p", "queue.read", "--user", "vic"))
    assert "of user vic" in created
    key = created.split("Key (shown only once): ")[1].split()[0]
    assert "vic-key  vic" in ok(gf(server, "keys", "list"))
    me = httpx.get(f"{server.url}/api/users/me", headers={"X-API-Key": key})
    assert me.json()["name"] == "vic"

    assert "revoked" in ok(gf(server, "users", "delete", "vic", "--yes"))
    assert httpx.get(f"{server.url}/api/queue", headers={"X-API-Key": key}).status_code == 401
    gone = one_line_error(gf(server, "users", "show", "vic"))
    assert "gpufleet users list" in gone


def test_the_built_in_admin_cannot_be_deleted_from_the_cli(server: ServerProcess) -> None:
    error = one_line_error(gf(server, "users", "delete", "admin", "--yes"))
    assert "built-in user 'admin'" in error
    bad = gf(server, "users", "update", "admin", "--max-gpus", "lots")
    assert bad.returncode == 2 and "is not a limit" in bad.stderr
