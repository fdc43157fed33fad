"""`gpufleet queue stats` says what the pools cost (cli/queue.py), from the stats' `cost`."""

from __future__ import annotations

import pytest

from gpufleet.cli.queue import _costs

COST = {
    "per_hour": 3.78,
    "to_date": 1234.5,
    "by_pool": {
        "burst": {
            "per_hour": 3.78,
            "to_date": 1234.5,
            "worker_hours": 653.2,
            "job_hours": 600.0,
            "idle": 100.55,
        }
    },
    "by_team": {"nlp": 900.0, "vision": 234.5},
    "by_user": {"ann": 1134.5},
}


def test_the_pools_cost_is_shown_an_hour_to_date_and_by_team_and_user(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _costs(COST)
    shown = capsys.readouterr().out
    assert "pools cost now" in shown and "$3.78/h" in shown
    assert "$1,234.50" in shown and "653.2" in shown and "$100.55" in shown
    assert shown.index("nlp") < shown.index("vision")  # the dearest first
    assert "ann" in shown and "$1,134.50" in shown
