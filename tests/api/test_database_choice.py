"""The API tier runs on PostgreSQL only where the database decides (tests/api/conftest.py)."""

from __future__ import annotations

import pytest


def _database(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("database_url")


def test_postgresql_runs_the_marked_tests_and_sqlite_runs_every_one(
    request: pytest.FixtureRequest,
) -> None:
    tier = [item for item in request.session.items if "tests/api/" in item.nodeid]
    by_test: dict[str, set[str]] = {}
    for item in tier:
        database = _database(item)
        if database is not None:
            by_test.setdefault(item.nodeid.split("[", 1)[0], set()).add(database)
    marked = {  # of those that ask for a database
        item.nodeid.split("[", 1)[0]
        for item in tier
        if item.get_closest_marker("both_databases") is not None and _database(item) is not None
    }
    named = {  # tests that name their databases themselves (a parametrize of database_url)
        item.nodeid.split("[", 1)[0]
        for item in tier
        if any(
            "database_url" in str(mark.args[0] if mark.args else "")
            for mark in item.iter_markers("parametrize")
        )
    }
    assert by_test, "no test of the tier asks for a database"
    assert all("sqlite" in found for test, found in by_test.items() if test not in named)
    on_postgres = {test for test, found in by_test.items() if "postgres" in found}
    # The marked ones, and those that name PostgreSQL themselves (a replica's audit chain).
    assert marked - named <= on_postgres
    assert on_postgres - marked <= named
