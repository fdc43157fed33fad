"""Scenario 10's checks over the simulated workers' notes (bench/scenarios/gangs.py): each
finds what it is there to find. The scenario itself runs in test_smoke.py."""

from __future__ import annotations

from bench.scenarios.gangs import double_offers, latencies, whole_gangs
from bench.workers import Seen


def note(
    kind: str,
    worker: str,
    job: str,
    attempt: str,
    at: float,
    rank: int | None = None,
    nodes: int | None = None,
) -> Seen:
    return Seen(kind, worker, job, attempt, at, at, rank, nodes)


def gang_offer(worker: str, attempt: str, rank: int, nodes: int, at: float = 1.0) -> Seen:
    return note("offer", worker, "j_gang", attempt, at, rank, nodes)


def test_a_gang_offered_to_each_of_its_nodes_once_is_whole() -> None:
    seen = [gang_offer(f"w{r}", "a_1", r, 3) for r in range(3)]
    assert whole_gangs(seen, {"j_gang": 3}) == []


def test_a_gang_offered_to_fewer_nodes_or_twice_to_one_worker_is_partial() -> None:
    short = [gang_offer(f"w{r}", "a_1", r, 3) for r in range(2)]
    twice = [gang_offer("w0", "a_2", 0, 2), gang_offer("w0", "a_2", 1, 2)]
    ranks = [gang_offer("w0", "a_3", 0, 2), gang_offer("w1", "a_3", 0, 2)]
    found = whole_gangs(short + twice + ranks, {"j_gang": 3})
    assert [line.split(":")[0] for line in found] == ["a_1", "a_2", "a_3"]


def test_a_gang_offered_as_one_node_or_naming_another_node_count_is_partial() -> None:
    one = [note("offer", "w9", "j_gang", "a_1", 1.0)]
    counts = [gang_offer("w0", "a_2", 0, 2), gang_offer("w1", "a_2", 1, 3)]
    assert len(whole_gangs(one + counts, {"j_gang": 2})) == 2
    assert whole_gangs([note("offer", "w9", "j_one", "a_3", 1.0)], {"j_gang": 2}) == []


def test_an_offer_before_the_worker_sent_the_end_of_its_job_is_a_double_offer() -> None:
    seen = [
        note("offer", "w0", "j_1", "a_1", 1.0),
        note("offer", "w0", "j_2", "a_2", 2.0),  # a_1 still held: nothing ended it
        note("finish", "w0", "j_1", "a_1", 3.0),
    ]
    assert double_offers(seen) == ["w0: a_2 offered while it held a_1"]


def test_an_offer_after_the_end_was_sent_or_rank_0_completed_the_gang_is_not() -> None:
    seen = [
        note("offer", "w0", "j_1", "a_1", 1.0),
        note("finish", "w0", "j_1", "a_1", 2.0),
        note("offer", "w0", "j_2", "a_2", 3.0),
        note("resend", "w0", "j_2", "a_2", 3.5),
        gang_offer("w1", "a_3", 1, 2, at=4.0),
        gang_offer("w2", "a_3", 0, 2, at=4.0),
        note("finish", "w2", "j_gang", "a_3", 5.0, rank=0),  # frees every node of a_3
        note("offer", "w1", "j_4", "a_4", 6.0),
        note("refused", "w0", "j_2", "a_2", 7.0),
        note("offer", "w0", "j_5", "a_5", 8.0),
    ]
    assert double_offers(seen) == []


def test_a_gang_runs_when_its_last_node_runs_and_one_that_never_did_is_named() -> None:
    seen = [
        note("running", "w0", "j_gang", "a_1", 2.0, rank=0),
        note("running", "w1", "j_gang", "a_1", 3.5, rank=1),
        note("running", "w2", "j_half", "a_2", 2.0, rank=0),
        note("running", "w3", "j_one", "a_3", 1.5),
    ]
    gangs = {"j_gang": (2, 1.0), "j_half": (2, 1.0)}
    one, by_size, never = latencies(seen, {"j_one": 1.0}, gangs)
    assert (one, by_size, never) == ([0.5], {2: [2.5]}, ["j_half"])
