"""A gang's checkpoint is complete once every node's part is committed, and a requeued gang
resumes from the newest complete one (domain/node_checkpoints.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.node_checkpoints import (
    completion,
    node_path,
    resume_choice,
    split_node_path,
)


@dataclass(frozen=True)
class Ckpt:
    id: str


def test_a_node_path_splits_back_into_its_rank_and_path() -> None:
    assert split_node_path(node_path(3, "checkpoints/checkpoint-4/model.pt")) == (
        3,
        "checkpoints/checkpoint-4/model.pt",
    )


def test_paths_that_name_no_node_do_not_split() -> None:
    for path in ("checkpoints/x", "node-/x", "node-01/x", "node-a/x", "node-1", "node-1/"):
        assert split_node_path(path) is None, path


def test_a_checkpoint_missing_a_node_is_incomplete_and_names_it() -> None:
    done = completion(3, [2, 0])
    assert (done.done, done.missing, done.complete) == ((0, 2), (1,), False)
    assert completion(2, [1, 0, 1]).complete


def test_a_rank_outside_the_gang_does_not_complete_it() -> None:
    assert completion(2, [0, 2]).missing == (1,)


def test_the_newest_checkpoint_some_node_missed_is_passed_over() -> None:
    newest, older = Ckpt("k2"), Ckpt("k1")
    parts = {"k2": [0], "k1": [0, 1]}
    assert resume_choice([newest, older], 2, parts) is older


def test_no_checkpoint_is_chosen_when_none_is_complete() -> None:
    assert resume_choice([Ckpt("k1")], 2, {"k1": [1]}) is None


def test_a_one_node_job_resumes_from_its_newest() -> None:
    assert resume_choice([Ckpt("k2"), Ckpt("k1")], 1, {}) == Ckpt("k2")


@given(
    nodes=st.integers(min_value=1, max_value=5),
    parts=st.lists(st.sets(st.integers(min_value=0, max_value=5)), max_size=8),
)
def test_the_choice_is_the_first_complete_candidate(nodes: int, parts: list[set[int]]) -> None:
    candidates = [Ckpt(f"k{i}") for i in range(len(parts))]
    by_id = {c.id: ranks for c, ranks in zip(candidates, parts, strict=True)}
    chosen = resume_choice(candidates, nodes, by_id)
    complete = [c for c in candidates if nodes == 1 or set(range(nodes)) <= by_id[c.id]]
    assert chosen == (complete[0] if complete else None)
    if chosen is not None:
        before = candidates[: candidates.index(chosen)]
        assert all(not completion(nodes, by_id[c.id]).complete for c in before) or nodes == 1
