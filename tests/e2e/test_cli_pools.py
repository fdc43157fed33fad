"""`gpufleet pools` as a subprocess against a real orchestrator (#36): create, list, show,
update and delete a pool, and the errors an operator meets, in the CLI's terms."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import ServerProcess, serving
from tests.e2e.test_cli import as_json, gf, ok, one_line_error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("cli-pools"), None)


def test_a_pool_round_trips_through_the_cli(server: ServerProcess) -> None:
    created = ok(
        gf(
            server,
            *("pools", "create", "burst", "--provider", "command"),
            *("--launch", "/opt/launch.sh --region 'us east'", "--terminate", "/opt/stop.sh"),
            *("-l", "pool=burst", "--gpus", "1", "--max", "4", "--price", "1.89"),
            *("--idle-timeout", "10m"),
        )
    )
    assert "Created pool burst: command provider, 0..4 ephemeral workers" in created
    assert "not launched yet" not in created  # the command provider is built
    burst = as_json(gf(server, "pools", "show", "burst", "--json"))
    assert burst["provider"]["launch"] == ["/opt/launch.sh", "--region", "us east"]
    assert (burst["idle_timeout_s"], burst["labels"]) == (600, {"pool": "burst"})

    ok(gf(server, "pools", "update", "burst", "--min", "1", "--max-cost", "10", "--disable"))
    ok(gf(server, "pools", "update", "burst", "--terminate", "/opt/terminate.sh"))
    burst = as_json(gf(server, "pools", "show", "burst", "--json"))
    assert (burst["min_workers"], burst["max_cost_per_hour"], burst["enabled"]) == (1, 10, False)
    assert burst["provider"] == {  # the launch command stays as it was
        "type": "command",
        "launch": ["/opt/launch.sh", "--region", "us east"],
        "terminate": ["/opt/terminate.sh"],
    }
    ok(gf(server, "pools", "update", "burst", "--max-cost", "none"))
    assert as_json(gf(server, "pools", "show", "burst", "--json"))["max_cost_per_hour"] is None

    created = ok(
        gf(
            server,
            *("pools", "create", "hpc", "--provider", "slurm", "--partition", "gpu"),
            *("--time-limit", "4:00:00", "--max", "2", "--worker-type", "persistent"),
            *("--worker-command", "/opt/venv/bin/gpufleet worker --verbose"),
        )
    )
    assert "not launched yet" not in created
    listed = ok(gf(server, "pools", "list"))
    assert "burst" in listed and "hpc" in listed and "slurm" in listed and "0..2" in listed
    shown = ok(gf(server, "pools", "show", "hpc"))
    assert "slurm partition=gpu time_limit=4:00:00" in shown and "no limit" in shown
    assert "command=/opt/venv/bin/gpufleet worker --verbose" in shown

    assert "Deleted pool hpc" in ok(gf(server, "pools", "delete", "hpc", "--yes"))
    names = [p["name"] for p in as_json(gf(server, "pools", "list", "--json"))["pools"]]
    assert names == ["burst"]


def test_the_cli_says_what_to_fix_in_its_own_terms(server: ServerProcess) -> None:
    ok(gf(server, "pools", "create", "taken", "--provider", "local", "--max", "1"))
    again = one_line_error(
        gf(server, "pools", "create", "taken", "--provider", "local", "--max", "1")
    )
    assert "a pool named 'taken' exists already" in again
    assert "gpufleet pools update taken" in again
    missing = one_line_error(gf(server, "pools", "show", "nope"))
    assert "no pool 'nope'; list the pools with `gpufleet pools list`" in missing
    wrong = one_line_error(
        gf(server, "pools", "create", "x", "--provider", "slurm", "--max", "1", "--launch", "a")
    )
    assert "--launch is for a command provider, not slurm" in wrong
    lacking = one_line_error(
        gf(server, "pools", "create", "x", "--provider", "command", "--max", "1")
    )
    assert "a command provider needs --launch" in lacking
    bad = one_line_error(
        gf(
            server,
            *("pools", "create", "x", "--provider", "command", "--max", "1"),
            *("--launch", "/opt/x 'unclosed", "--terminate", "t"),
        )
    )
    assert '--launch "/opt/x \'unclosed" is not a command line' in bad
    over = one_line_error(gf(server, "pools", "update", "taken", "--min", "3"))
    assert "min_workers (3) is over max_workers (1)" in over
