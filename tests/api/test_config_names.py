"""A config's name follows one rule, said in words wherever a name is refused (#15.5)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Fleet


@pytest.mark.parametrize("name", ["a/b", "a%2Fb", ".hidden", "-dash", "with space"])
async def test_an_invalid_config_name_is_refused_saying_what_is_allowed(
    fleet: Fleet, name: str
) -> None:
    answer = await fleet.admin.put(f"/api/configs/{name}", json={"command": ["python"]})

    assert answer.status_code == 422, answer.text
    assert "use letters, digits, '_', '-' and '.'" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/configs")).json()["configs"] == []


async def test_reading_or_deleting_a_config_by_an_impossible_name_says_the_rule(
    fleet: Fleet,
) -> None:
    for method in ("GET", "DELETE"):
        answer = await fleet.admin.request(method, "/api/configs/a/b")
        assert answer.status_code == 422, (method, answer.text)
        assert "no '/'" in answer.json()["detail"]
