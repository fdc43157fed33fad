"""What a config and a submission must say, checked before anything is stored."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.jobspec import (
    CONFIG_NAME,
    MAX_CONFIG_BYTES,
    check_config,
    check_config_name,
    config_gpu_count,
    job_gpu_count,
)
from gpufleet.errors import InvalidInput

GPU_FIELDS = ["gpu_count", "num_processes", "--num_processes"]

# ---- config names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["train", "sdxl-lora_v2.1", "0", "A" * 128, "a.b.c", "run-2024_01"]
)
def test_a_valid_config_name_is_returned_unchanged(name):
    assert check_config_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-leading-dash",
        ".hidden",
        "_under",
        "has space",
        "slash/name",
        "../escape",
        "a" * 129,
        "ünicode",
        "semi;colon",
    ],
)
def test_an_invalid_config_name_is_refused_with_the_rules_spelled_out(name):
    with pytest.raises(InvalidInput) as info:
        check_config_name(name)
    assert repr(name) in info.value.message
    assert "at most 128 characters" in info.value.message
    assert info.value.status_code == 422


@settings(max_examples=200)
@given(name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}", fullmatch=True))
def test_every_name_of_letters_digits_and_punctuation_up_to_128_characters_is_accepted(name):
    assert check_config_name(name) == name


@settings(max_examples=200)
# A trailing newline has its own test below, so that this one stays deterministic.
@given(name=st.text(st.characters(exclude_characters="\n"), max_size=140))
def test_an_accepted_config_name_is_short_and_made_only_of_allowed_characters(name):
    try:
        check_config_name(name)
    except InvalidInput:
        return
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
    assert 1 <= len(name) <= 128
    assert name[0].isascii() and name[0].isalnum()
    assert set(name) <= allowed


def test_a_config_name_with_a_trailing_newline_is_refused():
    with pytest.raises(InvalidInput):
        check_config_name("train\n")


def test_the_config_name_pattern_is_anchored_at_the_start():
    assert CONFIG_NAME.match("x/../y") is None


# ---- config bodies --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"command": ["python", "train.py"]},
        {"env": {"SEED": "1"}, "timeout_s": 3600},
        {"timeout_s": 0.5},
        {"gpu_count": 0},
        {"num_processes": 8, "--num_processes": 8},
        {"model_type": "lora", "learning_rate": 1e-4},  # SimpleTuner fields pass through
        {"command": None, "env": None, "timeout_s": None, "gpu_count": None},
    ],
)
def test_a_well_formed_config_is_returned_as_given(body):
    assert check_config(body) is body


@pytest.mark.parametrize("body", [[], "train", None, 3, [("command", ["x"])]])
def test_a_config_that_is_not_an_object_is_refused(body):
    with pytest.raises(InvalidInput, match="a config must be a JSON object"):
        check_config(body)


@pytest.mark.parametrize(
    "command", [[], "python train.py", ["python", 3], [None], {"argv": ["python"]}]
)
def test_a_command_must_be_a_non_empty_list_of_strings(command):
    with pytest.raises(InvalidInput, match="non-empty list of strings") as info:
        check_config({"command": command})
    assert '["python", "train.py"]' in info.value.message


@pytest.mark.parametrize("env", [["A=1"], {"A": 1}, {"A": None}, "A=1"])
def test_env_must_be_an_object_of_string_values(env):
    with pytest.raises(InvalidInput, match=r"'env(.A)?' must be (an object of |a )string"):
        check_config({"env": env})


@pytest.mark.parametrize("timeout", [0, -1, -0.5, True, False, "60", [60]])
def test_a_timeout_must_be_a_positive_number_of_seconds(timeout):
    with pytest.raises(InvalidInput, match="'timeout_s' must be a number of seconds > 0") as info:
        check_config({"timeout_s": timeout})
    assert repr(timeout) in info.value.message


def test_a_timeout_that_is_not_a_number_is_refused():
    with pytest.raises(InvalidInput):
        check_config({"timeout_s": math.nan})


@pytest.mark.parametrize("field", GPU_FIELDS)
@pytest.mark.parametrize("value", [-1, 1.5, "2", True, [2]])
def test_gpu_fields_must_be_whole_numbers_not_below_zero(field, value):
    with pytest.raises(InvalidInput, match=f"config field {field!r} must be a whole number"):
        check_config({field: value})


@settings(max_examples=200)
@given(
    field=st.sampled_from(GPU_FIELDS),
    value=st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=3)),
)
def test_a_gpu_field_is_accepted_exactly_when_it_is_an_int_from_0_to_1024(field, value):
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1024
    if ok:
        assert check_config({field: value}) == {field: value}
    else:
        with pytest.raises(InvalidInput):
            check_config({field: value})


@pytest.mark.parametrize("value", [1025, 3_000_000_000, 2**63, 2**64])
def test_a_gpu_count_past_what_any_machine_has_is_refused(value):
    """Past a PostgreSQL INTEGER (3e9) or SQLite's 64 bits it would break the write (#14)."""
    with pytest.raises(InvalidInput, match="from 0 to 1024"):
        check_config({"gpu_count": value})


@pytest.mark.parametrize("name", ["BAD=KEY", "", "1ST", "A B", "A-B", "\x00", "Ä", "A\x00B"])
def test_an_env_name_no_process_could_be_given_is_refused_by_name(name):
    with pytest.raises(InvalidInput, match="no process can be given") as info:
        check_config({"command": ["python"], "env": {name: "x"}})
    assert repr(name) in info.value.message


@pytest.mark.parametrize("name", ["A", "_", "a_1", "CUDA_VISIBLE_DEVICES", "_X9"])
def test_a_posix_env_name_is_accepted(name):
    check_config({"env": {name: "x"}})


def test_a_nul_in_an_env_value_is_refused_naming_the_variable():
    with pytest.raises(InvalidInput, match=r"'env\.SEED' contains a NUL"):
        check_config({"env": {"SEED": "1\x002"}})


@pytest.mark.parametrize(
    ("command", "field"), [(["py\x00thon"], "command[0]"), (["python", "a", "\x00"], "command[2]")]
)
def test_a_nul_in_the_command_is_refused_naming_the_argument(command, field):
    with pytest.raises(InvalidInput, match=rf"'{re.escape(field)}' contains a NUL"):
        check_config({"command": command})


def test_an_empty_program_name_is_refused():
    with pytest.raises(InvalidInput, match="command\\[0\\]' is empty"):
        check_config({"command": ["", "train.py"]})


@settings(max_examples=300)
@given(
    env=st.dictionaries(st.text(max_size=6), st.text(max_size=4), max_size=3),
    command=st.lists(st.text(max_size=6), min_size=1, max_size=3),
)
def test_whatever_config_is_accepted_a_process_can_be_started_with(env, command):
    """The check and the operating system agree: what passes, os.execve's checks take."""
    import os

    try:
        check_config({"command": command, "env": env})
    except InvalidInput:
        return
    for arg in command:
        os.fsencode(arg)  # no lone surrogates the filesystem encoding cannot take
        assert "\x00" not in arg and command[0]
    for name, value in env.items():
        assert name and "=" not in name and "\x00" not in name + value


def test_the_config_size_limit_is_one_megabyte():
    assert MAX_CONFIG_BYTES == 1_000_000


# ---- GPUs a config asks for -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "gpus"),
    [
        ({}, 0),
        ({"gpu_count": 2}, 2),
        ({"num_processes": 4}, 4),
        ({"--num_processes": 3}, 3),
        ({"gpu_count": 8, "num_processes": 8, "--num_processes": 8}, 8),
        ({"gpu_count": None, "num_processes": 8}, 8),  # a null states nothing
    ],
)
def test_the_gpu_count_is_the_one_the_config_states_else_zero(config, gpus):
    assert config_gpu_count(config) == gpus


@pytest.mark.parametrize(
    "config",
    [
        {"gpu_count": 0, "num_processes": 8},  # a zero beside the trainer's eight
        {"gpu_count": 1, "num_processes": 8},
        {"num_processes": 2, "--num_processes": 8},
    ],
)
def test_a_config_whose_gpu_fields_disagree_is_refused_naming_both(config):
    (first, a), (second, b) = config.items()
    with pytest.raises(InvalidInput) as refused:
        check_config(config)
    assert f"{first!r} ({a})" in refused.value.message
    assert f"{second!r} ({b})" in refused.value.message
    with pytest.raises(InvalidInput):
        config_gpu_count(config)


_COUNTS = st.fixed_dictionaries({}, optional={f: st.none() | st.integers(0, 9) for f in GPU_FIELDS})


@given(values=_COUNTS)
def test_the_gpu_count_is_the_fields_one_value_or_refused(values):
    stated = {values[f] for f in GPU_FIELDS if values.get(f) is not None}
    if len(stated) > 1:
        with pytest.raises(InvalidInput, match="disagree"):
            config_gpu_count(values)
    else:
        assert config_gpu_count(values) == next(iter(stated), 0)


@given(values=_COUNTS, requested=st.none() | st.integers(0, 9))
def test_a_submits_gpu_count_is_the_configs_own_when_it_states_one(values, requested):
    stated = {values[f] for f in GPU_FIELDS if values.get(f) is not None}
    if len(stated) > 1:
        return  # refused by the config's own check (above)
    own = next(iter(stated), None)
    if requested is not None and own is not None and requested != own:
        with pytest.raises(InvalidInput) as refused:
            job_gpu_count(requested, values)
        assert f"gpu_count {requested}" in refused.value.message
        assert f"({own})" in refused.value.message
        assert f"--gpus {own}" in refused.value.detail_for["cli"]
        assert f"GPU count to {own}" in refused.value.detail_for["ui"]
    else:
        expected = requested if requested is not None else (own or 0)
        assert job_gpu_count(requested, values) == expected


def test_an_invalid_gpu_count_is_refused_rather_than_guessed():
    with pytest.raises(InvalidInput, match="'num_processes'"):
        config_gpu_count({"num_processes": -2})
