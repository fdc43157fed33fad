"""What a pool may say (`domain/pools.py`): its provider, its fields, their changes, what the
audit log records of it, and its launches' states."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.pools import (
    EDITABLE,
    LAUNCH_TRANSITIONS,
    LIVE_LAUNCH,
    MAX_ARG,
    MAX_ARGV,
    MAX_POOL_WORKERS,
    STDERR_KEPT,
    CommandProvider,
    LaunchState,
    LocalProvider,
    SlurmProvider,
    audited,
    check_changes,
    check_pool,
    check_pool_name,
    check_provider,
    kept_stderr,
)
from gpufleet.errors import InvalidInput
from tests.nasty import values
from tests.unit.test_capacity import launch, pool

COMMAND = {"type": "command", "launch": ["/opt/launch.sh"], "terminate": ["/opt/stop.sh"]}
SLURM = {"type": "slurm", "partition": "gpu", "time_limit": "4:00:00"}


@pytest.mark.parametrize(
    ("given", "provider"),
    [
        ({"type": "local"}, LocalProvider()),
        (COMMAND, CommandProvider(("/opt/launch.sh",), ("/opt/stop.sh",))),
        (
            {**COMMAND, "list": ["sky", "status", "--json"]},
            CommandProvider(("/opt/launch.sh",), ("/opt/stop.sh",), ("sky", "status", "--json")),
        ),
        (SLURM, SlurmProvider("gpu", "4:00:00")),
        (
            {**SLURM, "time_limit": "1-12:00", "account": "lab-1"},
            SlurmProvider("gpu", "1-12:00", "lab-1"),
        ),
        ({**SLURM, "time_limit": "90"}, SlurmProvider("gpu", "90")),
        ({**SLURM, "time_limit": "UNLIMITED"}, SlurmProvider("gpu", "UNLIMITED")),
        (
            {**SLURM, "command": ["/opt/venv/bin/gpufleet", "worker"]},
            SlurmProvider("gpu", "4:00:00", None, ("/opt/venv/bin/gpufleet", "worker")),
        ),
    ],
)
def test_a_provider_reads_as_its_type_and_writes_back_as_it_was_given(
    given: dict[str, Any], provider: object
) -> None:
    assert check_provider(given) == provider
    assert check_provider(given).as_json() == given


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (None, "provider must be an object with a type"),
        ({"launch": ["x"]}, "provider must be an object with a type"),
        ({"type": "aws"}, "provider type 'aws' is not known; choose local, command, slurm"),
        ({"type": "local", "launch": ["x"]}, "provider field 'launch' is not one a local"),
        ({"type": "command", "launch": ["x"]}, "a command provider needs terminate"),
        ({**COMMAND, "launch": []}, "provider.launch must be a non-empty list of strings"),
        ({**COMMAND, "launch": "/opt/launch.sh"}, "provider.launch must be a non-empty list"),
        (
            {**COMMAND, "terminate": ["/opt/stop.sh", ""]},
            "provider.terminate[1] must be a non-empty",
        ),
        ({**COMMAND, "launch": ["/opt/x", 3]}, "provider.launch[1] must be a non-empty string"),
        ({**COMMAND, "launch": ["a\x00b"]}, "provider.launch[0] contains a NUL character"),
        ({**COMMAND, "launch": ["\ud800"]}, "provider.launch[0] contains a lone surrogate"),
        ({**COMMAND, "launch": ["x" * (MAX_ARG + 1)]}, f"is over {MAX_ARG} characters"),
        ({**COMMAND, "launch": ["x"] * (MAX_ARGV + 1)}, f"at most {MAX_ARGV} are taken"),
        ({**COMMAND, "list": []}, "provider.list must be a non-empty list"),
        ({"type": "slurm", "partition": "gpu"}, "a slurm provider needs time_limit"),
        ({**SLURM, "partition": "gpu;rm -rf"}, "provider.partition must be a Slurm name"),
        ({**SLURM, "time_limit": "4h"}, "provider.time_limit must be a Slurm time limit"),
        ({**SLURM, "account": ""}, "provider.account must be a Slurm name"),
        ({**SLURM, "command": []}, "provider.command must be a non-empty list of strings"),
        ({**SLURM, "command": "gpufleet worker"}, "provider.command must be a non-empty list"),
        ({**SLURM, "command": ["gpufleet", "a\x00b"]}, "provider.command[1] contains a NUL"),
        ({**SLURM, "list": ["squeue"]}, "provider field 'list' is not one a slurm provider has"),
    ],
)
def test_a_provider_that_is_not_one_is_refused_saying_what_to_fix(given: Any, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_provider(given)
    assert says in refused.value.message


@given(values)
def test_any_json_value_as_a_provider_is_read_or_refused_never_an_error(value: Any) -> None:
    with contextlib.suppress(InvalidInput):
        check_provider(value)


def test_a_pool_takes_the_defaults_of_what_it_is_not_given() -> None:
    checked = check_pool({"provider": {"type": "local"}, "max_workers": 2})
    assert checked == {**EDITABLE, "provider": {"type": "local"}, "max_workers": 2}


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({}, "a pool needs max_workers and provider"),
        ({"max_workers": 2, "provider": None}, "a pool needs provider"),
        ({"max_workers": MAX_POOL_WORKERS + 1}, f"from 0 to {MAX_POOL_WORKERS}"),
        ({"max_workers": True}, "max_workers must be a whole number"),
        ({"max_workers": 2**70}, "got a number that large"),
        ({"min_workers": 3, "max_workers": 2}, "min_workers (3) is over max_workers (2)"),
        ({"max_workers": 2, "price_per_hour": float("nan")}, "price_per_hour must be a number"),
        ({"max_workers": 2, "price_per_hour": -1}, "price_per_hour must be a number from 0"),
        ({"max_workers": 2, "max_cost_per_hour": 1e308}, "max_cost_per_hour must be a number"),
        (
            {"min_workers": 2, "max_workers": 2, "price_per_hour": 3, "max_cost_per_hour": 5},
            "min_workers (2) at 3 an hour cost more than max_cost_per_hour (5)",
        ),
        ({"max_workers": 2, "worker_type": "spot"}, "worker_type must be ephemeral or persistent"),
        ({"max_workers": 2, "labels": {"bad key": "x"}}, "label key 'bad key' is not valid"),
        ({"max_workers": 2, "labels": {"k": "v" * 257}}, "longer than 256 characters"),
        ({"max_workers": 2, "gpu_name": " "}, "gpu_name must be a non-empty text"),
        ({"max_workers": 2, "launch_timeout_s": 0}, "launch_timeout_s must be a whole number"),
        ({"max_workers": 2, "enabled": "yes"}, "enabled must be true or false"),
        ({"max_workers": 2, "colour": "red"}, "a pool has no field 'colour'"),
    ],
)
def test_a_pool_field_out_of_its_rule_is_refused_saying_what_to_fix(
    given: dict[str, Any], says: str
) -> None:
    body = {"provider": {"type": "local"}, **given} if "max_workers" in given else given
    with pytest.raises(InvalidInput) as refused:
        check_pool(body)
    assert says in refused.value.message


def test_a_change_is_checked_with_the_pools_other_fields_and_only_what_differs_is_kept() -> None:
    burst = pool(least=1, most=4)
    assert check_changes(burst, {"max_workers": 4, "min_workers": 2}) == {"min_workers": 2}
    with pytest.raises(InvalidInput, match=r"min_workers \(1\) is over max_workers \(0\)"):
        check_changes(burst, {"max_workers": 0})
    with pytest.raises(InvalidInput, match="name cannot change"):
        check_changes(burst, {"name": "other"})


def test_a_change_to_null_goes_back_to_the_default_or_is_refused_when_there_is_none() -> None:
    burst = pool(cost=10.0)
    assert check_changes(burst, {"max_cost_per_hour": None}) == {"max_cost_per_hour": None}
    assert check_changes(burst, {"labels": None}) == {"labels": {}}
    with pytest.raises(InvalidInput, match="a pool needs provider"):
        check_changes(burst, {"provider": None})


def test_the_audit_log_records_a_command_providers_programs_not_their_arguments() -> None:
    values = {"provider": {**COMMAND, "launch": ["/opt/launch.sh", "--token", "s3cret"]}}
    assert audited(values) == {
        "provider": {"type": "command", "launch": "/opt/launch.sh", "terminate": "/opt/stop.sh"}
    }
    assert audited({"provider": SLURM, "max_workers": 3}) == {"provider": SLURM, "max_workers": 3}


def test_a_pool_name_follows_the_rule_of_every_name() -> None:
    assert check_pool_name("burst-1.a") == "burst-1.a"
    with pytest.raises(InvalidInput, match="pool name 'a b' is not valid"):
        check_pool_name("a b")


def test_a_live_launch_is_one_that_has_not_ended_and_ended_ones_go_nowhere() -> None:
    ended = {s for s, nexts in LAUNCH_TRANSITIONS.items() if not nexts}
    assert ended == {LaunchState.FAILED, LaunchState.TERMINATED}
    assert frozenset(LaunchState) - ended == LIVE_LAUNCH
    reachable = {LaunchState.LAUNCHING} | {
        n for nexts in LAUNCH_TRANSITIONS.values() for n in nexts
    }
    assert reachable == set(LaunchState)


def test_a_launch_failed_when_it_has_an_error_and_never_registered() -> None:
    burst = pool()
    assert launch(burst, 1, LaunchState.FAILED, error="exit 1").failed
    assert launch(burst, 2, LaunchState.TERMINATING, error="did not register in 600 s").failed
    registered = launch(burst, 3, LaunchState.TERMINATED, registered=burst.created_at, error="x")
    assert not registered.failed
    assert not launch(burst, 4).failed


@given(st.text(max_size=3 * STDERR_KEPT))
def test_a_providers_stderr_is_kept_by_its_end(text: str) -> None:
    kept = kept_stderr(text)
    assert len(kept) <= STDERR_KEPT and text.endswith(kept)
    assert kept == text or len(kept) == STDERR_KEPT
