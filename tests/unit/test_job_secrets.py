"""Secrets for jobs: names, values, who writes, references in a config's env, masking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import job_secrets as js
from gpufleet.domain.jobspec import check_config
from gpufleet.domain.levels import Level
from gpufleet.domain.secrets import open_secret, seal_secret
from gpufleet.errors import InvalidInput

# ---- references in a config's env -------------------------------------------------------------


def test_a_config_env_may_refer_to_a_secret_beside_plain_values():
    config = {"command": ["true"], "env": {"HF_TOKEN": {"secret": "hf"}, "MODE": "fast"}}
    assert check_config(config) is config
    assert js.references(config) == {"HF_TOKEN": "hf"}
    assert js.plain_env(config) == {"MODE": "fast"}


@pytest.mark.parametrize(
    "value",
    [
        {"secret": "HF"},  # not a secret name
        {"secret": ""},
        {"secret": 3},
        {"secret": "hf", "team": "nlp"},  # only the one key
        {"name": "hf"},
        {},
        ["hf"],
        5,
        None,
        {"secret": "a" * 65},
    ],
)
def test_a_malformed_reference_is_refused_naming_its_field(value):
    with pytest.raises(InvalidInput) as caught:
        check_config({"env": {"HF_TOKEN": value}})
    assert "env.HF_TOKEN" in caught.value.message or "'HF_TOKEN'" in caught.value.message


@pytest.mark.parametrize("name", ["hf", "wandb-key", "a_1", "0", "x" * 64])
def test_a_valid_secret_name_is_returned(name):
    assert js.check_name(name) == name


@pytest.mark.parametrize("name", ["", "HF", "a b", "a/b", "-a", "é", "x" * 65, "a\x00"])
def test_an_invalid_secret_name_is_refused(name):
    with pytest.raises(InvalidInput, match="secret name"):
        js.check_name(name)


def test_a_value_is_bounded_non_empty_and_without_nul():
    assert js.check_value("hf_abc") == "hf_abc"
    assert js.check_value("x" * js.MAX_SECRET_BYTES)
    for bad in ["", "a\x00b", "x" * (js.MAX_SECRET_BYTES + 1), "\ud800", 5, None]:
        with pytest.raises(InvalidInput):
            js.check_value(bad)


def test_a_reference_resolves_to_the_users_secret_before_the_teams():
    refs = {"HF_TOKEN": "hf", "WANDB_API_KEY": "wandb", "X": "gone"}
    found, missing = js.resolve(refs, {"hf": "mine"}, {"hf": "team's", "wandb": "w"})
    assert found == {"HF_TOKEN": "mine", "WANDB_API_KEY": "w"}
    assert missing == [js.Unresolved("X", "gone")]
    said = js.say_missing(missing, "alice", "nlp")
    assert "X" in said and "'gone'" in said and "alice" in said and "nlp" in said


# ---- who writes --------------------------------------------------------------------------------

T = frozenset({"t_nlp"})


@pytest.mark.parametrize(
    ("level", "scope", "owner", "allowed"),
    [
        (Level.RESEARCHER, js.Scope.USER, "u_me", True),
        (Level.VIEWER, js.Scope.USER, "u_me", True),
        (Level.RESEARCHER, js.Scope.USER, "u_other", False),
        (Level.LEAD, js.Scope.USER, "u_other", False),
        (Level.ADMIN, js.Scope.USER, "u_other", True),
        (Level.LEAD, js.Scope.TEAM, "t_nlp", True),
        (Level.LEAD, js.Scope.TEAM, "t_vision", False),
        (Level.RESEARCHER, js.Scope.TEAM, "t_nlp", False),
        (Level.VIEWER, js.Scope.TEAM, "t_nlp", False),
        (Level.ADMIN, js.Scope.TEAM, "t_vision", True),
    ],
)
def test_who_may_write_a_secret(level, scope, owner, allowed):
    assert js.may_write(level, T, scope, owner, "u_me") is allowed


# ---- credentials in plain values ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "hf_token",
        "GITHUB_PAT",
        "MY_SECRET",
        "AWS_SECRET_KEY_ID",
    ],
)
def test_a_credential_looking_name_is_masked(name):
    assert js.looks_like_credential(name)
    shown = js.masked({"env": {name: "hf_abc", "MODE": "fast"}, "lr": 1})
    assert shown == {"env": {name: js.MASK, "MODE": "fast"}, "lr": 1}


@pytest.mark.parametrize("name", ["MODE", "PATH", "KEYBOARD", "TOKENIZER_PATH", "MONKEY", "PASSES"])
def test_an_ordinary_name_is_shown(name):
    assert not js.looks_like_credential(name)
    assert js.masked({"env": {name: "v"}}) == {"env": {name: "v"}}


def test_a_reference_is_shown_as_a_name_not_masked():
    config = {"env": {"HF_TOKEN": {"secret": "hf"}}}
    assert js.masked(config) == config


# ---- sealed at rest ------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=200).filter(lambda s: "\x00" not in s))
def test_a_sealed_secret_opens_only_for_its_own_row(value):
    try:
        value.encode()
    except UnicodeEncodeError:
        return
    key = b"k" * 32
    owner = js.sealed_owner(js.Scope.USER, "u_alice", "hf")
    stored = seal_secret(key, js.SEAL_PURPOSE, owner, value)
    assert len(value) < 8 or value not in stored
    assert open_secret(key, js.SEAL_PURPOSE, owner, stored) == value
    moved = js.sealed_owner(js.Scope.USER, "u_bob", "hf")
    assert open_secret(key, js.SEAL_PURPOSE, moved, stored) is None
    assert open_secret(b"j" * 32, js.SEAL_PURPOSE, owner, stored) is None


def test_a_masked_credential_sent_back_is_refused_naming_its_field():
    with pytest.raises(InvalidInput, match=r"env\.HF_TOKEN.*masked"):
        check_config({"env": {"HF_TOKEN": js.MASK}})
    assert check_config({"env": {"MODE": js.MASK}})  # not a credential's name: a value
