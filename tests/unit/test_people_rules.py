"""The rules on users and teams (domain/people.py): names, weights, limits, the built-in
admin, and which team a job is for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.levels import ADMIN_USER_ID, Level
from gpufleet.domain.people import (
    check_level_change,
    check_limit,
    check_name,
    check_user_deletable,
    check_weight,
    choose_team,
)
from gpufleet.domain.records import Team, User
from gpufleet.errors import Conflict, Forbidden, InvalidInput

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def user(user_id: str = "u_1", level: Level = Level.RESEARCHER, default: str | None = None) -> User:
    return User(
        user_id, user_id.removeprefix("u_"), level, default, None, None, None, 0.0, None, NOW
    )


def team(team_id: str) -> Team:
    return Team(team_id, team_id.removeprefix("t_"), 1.0, None, None, False, False, 0.0, None, NOW)


@pytest.mark.parametrize("name", ["alice", "a", "nlp-2", "j.doe_1", "A" * 64])
def test_plain_names_are_accepted(name: str) -> None:
    assert check_name("user", name) == name


@pytest.mark.parametrize("name", ["", "a" * 65, "-x", ".x", "a b", "a/b", "a\x00b", "\ud800", "é"])
def test_other_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(InvalidInput, match="use letters, digits"):
        check_name("team", name)


def test_me_is_no_users_name_but_may_be_a_teams() -> None:
    with pytest.raises(InvalidInput, match="caller's own user"):
        check_name("user", "me")
    assert check_name("team", "me") == "me"


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), 1e7, True])
def test_a_weight_is_above_zero_finite_and_bounded(weight: float) -> None:
    with pytest.raises(InvalidInput, match="weight"):
        check_weight(weight)


@pytest.mark.parametrize("value", [-1, 2**31, True, 1.5, "3"])
def test_a_limit_is_a_whole_number_from_zero_or_none(value: object) -> None:
    with pytest.raises(InvalidInput, match="max_gpus"):
        check_limit("max_gpus", value)  # type: ignore[arg-type]
    assert check_limit("max_gpus", None) is None
    assert check_limit("max_gpus", 0) == 0


def test_the_built_in_admin_and_the_caller_are_kept_from_losing_their_level() -> None:
    admin = user(ADMIN_USER_ID, Level.ADMIN)
    with pytest.raises(Conflict, match="always an admin"):
        check_level_change(admin, Level.LEAD, "u_other")
    with pytest.raises(Conflict, match="built-in"):
        check_user_deletable(admin, "u_other")
    me = user("u_me", Level.ADMIN)
    with pytest.raises(Conflict, match="your own level"):
        check_level_change(me, Level.VIEWER, "u_me")
    check_level_change(me, Level.VIEWER, "u_other")  # another admin may
    check_level_change(admin, Level.ADMIN, "u_other")  # unchanged is no change


ids = st.lists(st.sampled_from(["t_a", "t_b", "t_c"]), unique=True)


@given(theirs=ids, default=st.none() | st.sampled_from(["t_a", "t_b", "t_c"]))
def test_without_a_team_named_a_job_is_for_the_default_else_the_only_team(
    theirs: list[str], default: str | None
) -> None:
    teams = [team(t) for t in theirs]
    chosen = choose_team(user(default=default), teams, None)
    if default in theirs:
        assert chosen is not None and chosen.id == default
    elif len(theirs) == 1:
        assert chosen is not None and chosen.id == theirs[0]
    else:
        assert chosen is None


@given(theirs=ids, asked=st.sampled_from(["t_a", "t_b", "t_c"]))
def test_a_team_named_is_taken_only_when_it_is_one_of_theirs(theirs: list[str], asked: str) -> None:
    teams = [team(t) for t in theirs]
    if asked in theirs:
        chosen = choose_team(user(default="t_c"), teams, team(asked))
        assert chosen is not None and chosen.id == asked
    else:
        with pytest.raises(Forbidden, match="is not in team"):
            choose_team(user(), teams, team(asked))
