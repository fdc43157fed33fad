"""A worker named where its id is asked for (cli/resolve.py), against a fake fleet."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.cli.resolve import worker_id
from gpufleet.errors import InvalidInput, NotFound


class FakeApi:
    """Answers the workers list the way the orchestrator does, from a fixed fleet."""

    def __init__(self, *workers: tuple[str, str]) -> None:
        self.workers = [{"id": i, "name": n} for i, n in workers]

    def get(self, path: str, **params: Any) -> Any:
        assert path == "/api/admin/workers"
        return {"workers": self.workers}


FLEET = FakeApi(("w_1", "gpu-1"), ("w_2", "twin"), ("w_3", "twin"), ("w_4", "w_1"))


def test_an_id_names_its_worker_and_wins_over_a_worker_named_like_it() -> None:
    assert worker_id(FLEET, "w_1") == "w_1"


def test_a_unique_name_names_its_worker() -> None:
    assert worker_id(FLEET, "gpu-1") == "w_1"


def test_a_name_two_workers_share_is_refused_listing_their_ids() -> None:
    with pytest.raises(InvalidInput, match=r"2 workers are named 'twin' \(w_2, w_3\); give the id"):
        worker_id(FLEET, "twin")


def test_an_unknown_name_says_how_to_list_the_workers() -> None:
    with pytest.raises(NotFound, match="gpufleet workers list"):
        worker_id(FLEET, "nobody")
