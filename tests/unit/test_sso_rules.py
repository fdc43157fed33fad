"""Single sign-on's pure rules (domain/sso.py): the group map, the level and teams a
person's groups give, a new person's name, and the settings that must go together."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import sso
from gpufleet.domain.levels import Level
from gpufleet.errors import ConfigurationError
from gpufleet.server.settings import ServerSettings

RULES = sso.parse_group_map(["gpu-admins=admin", "ml=researcher:ml", "ml-leads=lead:ml"])


def test_a_group_map_reads_levels_and_teams() -> None:
    assert RULES[1] == sso.GroupRule("ml", Level.RESEARCHER, "ml")
    assert RULES[0].team is None


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("gpu-admins", "no GROUP="),
        ("=admin", "no GROUP="),
        ("g=root", "'root' is not a level"),
        ("g=admin:bad team", "not a valid team name"),
    ],
)
def test_a_bad_group_map_entry_is_named(entry: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sso.parse_group_map([entry])


def test_the_highest_mapped_level_wins_and_unmapped_people_get_the_default() -> None:
    both = sso.standing(frozenset({"ml", "gpu-admins", "other"}), RULES, Level.VIEWER)
    assert both == sso.Standing(Level.ADMIN, frozenset({"ml"}), frozenset())
    none = sso.standing(frozenset({"other"}), RULES, Level.VIEWER)
    assert none == sso.Standing(Level.VIEWER, frozenset(), frozenset({"ml"}))


@given(st.sets(st.sampled_from(["gpu-admins", "ml", "ml-leads", "x", "y"])))
def test_a_level_is_never_above_what_some_group_gives(groups: set[str]) -> None:
    got = sso.standing(frozenset(groups), RULES, Level.VIEWER)
    given_levels = [r.level for r in RULES if r.group in groups]
    assert got.level in (given_levels or [Level.VIEWER])
    assert got.teams.isdisjoint(got.not_teams)
    assert all(list(Level).index(got.level) <= list(Level).index(lv) for lv in given_levels)


def test_groups_come_from_a_list_or_one_string_and_nothing_else() -> None:
    assert sso.groups_of({"groups": ["a", 3, "b"]}, "groups") == {"a", "b"}
    assert sso.groups_of({"roles": "a"}, "roles") == {"a"}
    assert sso.groups_of({"groups": {"a": 1}}, "groups") == frozenset()


def test_a_new_persons_name_is_cut_to_the_rule_and_never_me() -> None:
    assert sso.user_name({"preferred_username": "Ada Lovelace"}, "i", "s") == "Ada-Lovelace"
    assert sso.user_name({"email": "ada@example.com"}, "i", "s") == "ada-example.com"
    assert sso.user_name({"preferred_username": "me"}, "i", "s").startswith("sso-")
    assert sso.user_name({"preferred_username": "../.."}, "i", "s").startswith("sso-")
    assert sso.taken_name("ada", "i", "s1") != sso.taken_name("ada", "i", "s2")


def test_an_issuer_is_https_or_on_this_machine() -> None:
    assert sso.check_issuer("https://login.example.com/")
    assert sso.check_issuer("http://127.0.0.1:9400")
    assert not sso.check_issuer("http://login.example.com")
    assert not sso.check_issuer("file:///etc/passwd")


def test_single_sign_on_settings_must_go_together(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    with pytest.raises(ConfigurationError, match="needs --oidc-client-id"):
        ServerSettings(oidc_issuer="https://idp.example.com")
    with pytest.raises(ConfigurationError, match="--oidc-only needs --oidc-issuer"):
        ServerSettings(oidc_only=True)
    with pytest.raises(ConfigurationError, match="not an https"):
        ServerSettings(
            oidc_issuer="http://idp.example.com",
            oidc_client_id="c",
            oidc_client_secret_file=secret,
        )
    with pytest.raises(ConfigurationError, match="not a level"):
        ServerSettings.from_options({"oidc_group_map": ("g=root",)})
