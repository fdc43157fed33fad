"""The worker, job and attempt lifecycles: the transition tables and what follows from them."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    ATTEMPT_TRANSITIONS,
    JOB_TRANSITIONS,
    PLACED_JOB,
    REPORTED_ATTEMPT,
    REPORTED_STATUS,
    TAKEN_ATTEMPT,
    TERMINAL_ATTEMPT,
    TERMINAL_JOB,
    WAITING_JOB,
    WORKER_TRANSITIONS,
    AttemptStatus,
    JobStatus,
    WorkerStatus,
    can_delete_worker,
    can_move_attempt,
    can_move_job,
    can_move_worker,
    check_job_move,
    derive_worker_status,
    failed_to_start,
    parse_reported_status,
    start_failure_workers,
)
from gpufleet.errors import Conflict, InvalidInput

TABLES: list[tuple[type[StrEnum], dict, StrEnum]] = [
    (WorkerStatus, WORKER_TRANSITIONS, WorkerStatus.CONNECTING),
    (JobStatus, JOB_TRANSITIONS, JobStatus.PENDING_APPROVAL),  # or queued: no rule held it
    (AttemptStatus, ATTEMPT_TRANSITIONS, AttemptStatus.OFFERED),
]
TABLE_IDS = ["worker", "job", "attempt"]

FACT_NAMES = ("offline", "drained", "has_job", "stream_open")
ALL_FACTS = [
    dict(zip(FACT_NAMES, values, strict=True))
    for values in itertools.product([False, True], repeat=len(FACT_NAMES))
]
facts = st.fixed_dictionaries({name: st.booleans() for name in FACT_NAMES})


def reachable(table: dict, start: StrEnum) -> set[StrEnum]:
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in table[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# ---- the tables themselves -----------------------------------------------------------------


@pytest.mark.parametrize(("enum", "table", "start"), TABLES, ids=TABLE_IDS)
def test_every_status_has_exactly_one_row_in_its_table(enum, table, start):
    assert set(table) == set(enum)
    assert all(set(targets) <= set(enum) for targets in table.values())


@pytest.mark.parametrize(("enum", "table", "start"), TABLES, ids=TABLE_IDS)
def test_every_status_is_reachable_from_the_initial_one(enum, table, start):
    assert reachable(table, start) == set(enum)


@pytest.mark.parametrize(("enum", "table", "start"), TABLES, ids=TABLE_IDS)
def test_no_status_lists_itself_as_a_transition(enum, table, start):
    assert all(status not in targets for status, targets in table.items())


def test_terminal_job_states_are_completed_failed_and_cancelled():
    assert {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED} == TERMINAL_JOB


def test_terminal_attempt_states_are_every_ending():
    assert {
        AttemptStatus.COMPLETED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.LOST,
        AttemptStatus.WITHDRAWN,
        AttemptStatus.PREEMPTED,
    } == TERMINAL_ATTEMPT


def test_active_and_terminal_attempt_states_split_the_attempt_lifecycle_in_two():
    assert ACTIVE_ATTEMPT.isdisjoint(TERMINAL_ATTEMPT)
    assert set(AttemptStatus) == ACTIVE_ATTEMPT | TERMINAL_ATTEMPT


def test_a_placed_job_is_one_neither_waiting_nor_ended():
    assert set(JobStatus) - WAITING_JOB - TERMINAL_JOB == PLACED_JOB


def test_a_job_held_for_approval_is_queued_when_approved_and_cancelled_when_rejected():
    assert JOB_TRANSITIONS[JobStatus.PENDING_APPROVAL] == {JobStatus.QUEUED, JobStatus.CANCELLED}
    assert not can_move_job(JobStatus.PENDING_APPROVAL, JobStatus.OFFERED)


def test_a_taken_attempt_is_an_active_one_its_worker_has_acknowledged():
    assert ACTIVE_ATTEMPT - {AttemptStatus.OFFERED} == TAKEN_ATTEMPT


def test_only_a_worker_report_brings_an_attempt_to_a_reported_status():
    assert set(AttemptStatus) - REPORTED_ATTEMPT == {
        AttemptStatus.OFFERED,
        AttemptStatus.LOST,
        AttemptStatus.WITHDRAWN,
    }


def test_every_worker_status_can_be_left():
    assert all(WORKER_TRANSITIONS[status] for status in WorkerStatus)


@given(old=st.sampled_from(JobStatus), new=st.sampled_from(JobStatus))
def test_a_terminal_job_can_never_move(old, new):
    if old in TERMINAL_JOB:
        assert not can_move_job(old, new)


@given(old=st.sampled_from(AttemptStatus), new=st.sampled_from(AttemptStatus))
def test_a_terminal_attempt_can_never_move(old, new):
    if old in TERMINAL_ATTEMPT:
        assert not can_move_attempt(old, new)


@pytest.mark.parametrize(("enum", "table", "start"), TABLES[1:], ids=TABLE_IDS[1:])
def test_every_non_terminal_job_or_attempt_state_can_still_reach_an_ending(enum, table, start):
    for status in enum:
        assert any(not table[s] for s in reachable(table, status)), status


@given(old=st.sampled_from(JobStatus), new=st.sampled_from(JobStatus))
def test_can_move_job_follows_the_table_and_never_allows_staying_put(old, new):
    assert can_move_job(old, new) == (new in JOB_TRANSITIONS[old])
    assert not can_move_job(old, old)


@given(old=st.sampled_from(AttemptStatus), new=st.sampled_from(AttemptStatus))
def test_can_move_attempt_follows_the_table(old, new):
    assert can_move_attempt(old, new) == (new in ATTEMPT_TRANSITIONS[old])


# ---- walks through the job lifecycle -------------------------------------------------------


@st.composite
def job_walks(draw: st.DrawFn) -> list[JobStatus]:
    """A path from QUEUED that takes allowed moves until it ends or runs out of steps."""
    path = [JobStatus.QUEUED]
    for _ in range(draw(st.integers(0, 30))):
        options = sorted(JOB_TRANSITIONS[path[-1]])
        if not options:
            break
        path.append(draw(st.sampled_from(options)))
    return path


@settings(max_examples=200)
@given(path=job_walks())
def test_a_random_walk_through_the_job_table_only_makes_allowed_moves(path):
    for old, new in itertools.pairwise(path):
        assert can_move_job(old, new)
        check_job_move("j_walk", old, new)  # raises if the move were refused


@settings(max_examples=200)
@given(path=job_walks())
def test_a_job_walk_that_cannot_go_on_ends_in_a_terminal_state(path):
    last = path[-1]
    if not JOB_TRANSITIONS[last]:
        assert last in TERMINAL_JOB
    # Once terminal, a walk stops: nothing terminal appears before the end.
    assert not any(s in TERMINAL_JOB for s in path[:-1])


@settings(max_examples=200)
@given(path=job_walks(), target=st.sampled_from(JobStatus))
def test_check_job_move_refuses_exactly_the_moves_the_table_lacks(path, target):
    current = path[-1]
    if target in JOB_TRANSITIONS[current]:
        check_job_move("j_1", current, target)
    else:
        with pytest.raises(Conflict, match=f"job j_1 is {current} and cannot become {target}"):
            check_job_move("j_1", current, target)


def test_a_completed_job_cannot_be_requeued():
    with pytest.raises(Conflict) as info:
        check_job_move("j_abc", JobStatus.COMPLETED, JobStatus.QUEUED)
    assert info.value.status_code == 409
    assert "j_abc" in info.value.message


@pytest.mark.parametrize("active", [JobStatus.OFFERED, JobStatus.RUNNING])
def test_an_offered_or_running_job_can_go_back_to_the_queue(active):
    assert can_move_job(active, JobStatus.QUEUED)


def test_a_queued_job_can_only_be_offered_or_cancelled():
    assert {s for s in JobStatus if can_move_job(JobStatus.QUEUED, s)} == {
        JobStatus.OFFERED,
        JobStatus.CANCELLED,
    }


# ---- the poison-job rule ------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    worker_id: str
    status: AttemptStatus
    acknowledged_at: datetime | None
    started_at: datetime | None


T0 = datetime(2025, 1, 1, tzinfo=UTC)
ended_attempts = st.builds(
    Ended,
    worker_id=st.sampled_from(["w_1", "w_2", "w_3", "w_4"]),
    status=st.sampled_from(sorted(TERMINAL_ATTEMPT)),
    acknowledged_at=st.none() | st.just(T0),
    started_at=st.none() | st.just(T0),
)


@given(ended_attempts)
def test_an_attempt_failed_to_start_when_it_failed_or_was_lost_after_its_ack_before_running(
    attempt,
):
    expected = attempt.started_at is None and (
        attempt.status is AttemptStatus.FAILED
        or (attempt.status is AttemptStatus.LOST and attempt.acknowledged_at is not None)
    )
    assert failed_to_start(attempt) is expected


@pytest.mark.parametrize(
    "status",
    [AttemptStatus.COMPLETED, AttemptStatus.CANCELLED, AttemptStatus.WITHDRAWN],
)
def test_completed_cancelled_or_withdrawn_attempts_never_failed_to_start(status):
    assert not failed_to_start(Ended("w_1", status, None, None))
    assert not failed_to_start(Ended("w_1", status, T0, None))


@given(st.lists(ended_attempts, max_size=12))
def test_the_start_failures_of_a_job_count_each_worker_once(history):
    workers = start_failure_workers(history)
    assert workers == {a.worker_id for a in history if failed_to_start(a)}
    assert start_failure_workers(history + history) == workers  # repeats on one worker: one
    assert len(workers) <= len({a.worker_id for a in history})


# ---- what workers report --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "status"),
    [
        ("acknowledged", AttemptStatus.ACKNOWLEDGED),
        ("starting", AttemptStatus.ACKNOWLEDGED),
        ("running", AttemptStatus.RUNNING),
        ("training", AttemptStatus.RUNNING),
        ("completed", AttemptStatus.COMPLETED),
        ("failed", AttemptStatus.FAILED),
        ("cancelled", AttemptStatus.CANCELLED),
    ],
)
def test_a_reported_status_word_maps_to_its_attempt_status(word, status):
    assert parse_reported_status(word) is status


def test_every_reportable_status_is_a_move_an_offered_attempt_may_make():
    for status in REPORTED_STATUS.values():
        assert can_move_attempt(AttemptStatus.OFFERED, status)


@pytest.mark.parametrize("word", ["offered", "lost", "withdrawn", "Running", " running", ""])
def test_a_worker_cannot_report_a_status_only_the_orchestrator_decides_or_a_misspelling(word):
    with pytest.raises(InvalidInput):
        parse_reported_status(word)


@settings(max_examples=200)
@given(word=st.text(max_size=20).filter(lambda w: w not in REPORTED_STATUS))
def test_any_unknown_reported_status_is_refused_with_the_allowed_words(word):
    with pytest.raises(InvalidInput) as info:
        parse_reported_status(word)
    message = info.value.message
    assert repr(word) in message
    assert message.endswith("send one of: " + ", ".join(sorted(REPORTED_STATUS)))
    assert info.value.status_code == 422


# ---- a worker's status follows from its facts -----------------------------------------------


def expected_worker_status(offline: bool, drained: bool, has_job: bool, stream_open: bool):
    if offline:
        return WorkerStatus.OFFLINE
    if drained:
        return WorkerStatus.DRAINING
    if has_job:
        return WorkerStatus.BUSY
    return WorkerStatus.IDLE if stream_open else WorkerStatus.CONNECTING


@pytest.mark.parametrize(
    "fact_set", ALL_FACTS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "none"
)
def test_worker_status_precedence_is_offline_then_draining_then_busy_then_stream(fact_set):
    assert derive_worker_status(**fact_set) is expected_worker_status(**fact_set)


def test_every_worker_status_is_derived_from_some_facts():
    assert {derive_worker_status(**f) for f in ALL_FACTS} == set(WorkerStatus)


@given(facts=facts)
def test_an_offline_worker_is_offline_whatever_else_is_true(facts):
    if facts["offline"]:
        assert derive_worker_status(**facts) is WorkerStatus.OFFLINE
    else:
        assert derive_worker_status(**facts) is not WorkerStatus.OFFLINE


@given(facts=facts)
def test_a_worker_is_idle_only_with_an_open_stream_and_nothing_else_holding_it(facts):
    idle = derive_worker_status(**facts) is WorkerStatus.IDLE
    assert idle == (
        facts["stream_open"] and not (facts["offline"] or facts["drained"] or facts["has_job"])
    )


# ---- deleting a worker ----------------------------------------------------------------------


@pytest.mark.parametrize("status", list(WorkerStatus))
def test_a_worker_that_never_connected_may_be_deleted_whatever_its_status(status):
    # As GitHub deletes a runner that never came online: no agent holds the token yet.
    assert can_delete_worker(status, ever_connected=False)


@pytest.mark.parametrize("status", list(WorkerStatus))
def test_a_worker_that_connected_may_be_deleted_only_once_offline(status):
    assert can_delete_worker(status, ever_connected=True) is (status is WorkerStatus.OFFLINE)


def test_a_connected_idle_worker_may_not_be_deleted_and_an_offline_one_may():
    assert not can_delete_worker(WorkerStatus.IDLE, ever_connected=True)
    assert can_delete_worker(WorkerStatus.OFFLINE, ever_connected=True)
    assert can_delete_worker(WorkerStatus.DRAINING, ever_connected=False)


# What the server does to a worker's facts (`services/fleet.py`, `health.py`, `dispatch.py`,
# `lifecycle.release_worker`): each operation, whether it applies, and the facts after it.
Facts = dict[str, bool]


def _status(f: Facts) -> WorkerStatus:
    return derive_worker_status(**f)


SERVER_OPERATIONS: dict[str, tuple] = {
    "register": (lambda f: True, lambda f: {**f, "offline": False}),
    "register without its job": (
        lambda f: True,
        lambda f: {**f, "offline": False, "has_job": False},
    ),
    "open stream": (lambda f: not f["offline"], lambda f: {**f, "stream_open": True}),
    "close stream": (lambda f: True, lambda f: {**f, "stream_open": False}),
    "claim": (lambda f: _status(f) is WorkerStatus.IDLE, lambda f: {**f, "has_job": True}),
    "release": (lambda f: True, lambda f: {**f, "has_job": False}),
    "drain": (lambda f: True, lambda f: {**f, "drained": True}),
    "undrain": (lambda f: True, lambda f: {**f, "drained": False}),
    "go offline": (
        lambda f: True,
        lambda f: {**f, "offline": True, "has_job": False, "stream_open": False},
    ),
}
NEW_WORKER: Facts = dict.fromkeys(FACT_NAMES, False)


def server_moves() -> set[tuple[WorkerStatus, WorkerStatus, str]]:
    """Every status change the server's operations make, from every fact set they reach."""
    seen = [NEW_WORKER]
    todo = deque(seen)
    moves = set()
    while todo:
        before = todo.popleft()
        for name, (applies, apply) in SERVER_OPERATIONS.items():
            if not applies(before):
                continue
            after = apply(before)
            moves.add((_status(before), _status(after), name))
            if after not in seen:
                seen.append(after)
                todo.append(after)
    return moves


def test_every_status_change_the_server_makes_is_allowed():
    refused = [m for m in server_moves() if not can_move_worker(m[0], m[1])]
    assert refused == []


def test_the_worker_table_allows_no_move_the_server_never_makes():
    made = {(old, new) for old, new, _ in server_moves() if old != new}
    listed = {(old, new) for old, targets in WORKER_TRANSITIONS.items() for new in targets}
    assert listed == made


@pytest.mark.parametrize("new", [WorkerStatus.IDLE, WorkerStatus.BUSY])
def test_an_offline_worker_cannot_become_idle_or_busy_without_registering(new):
    assert not can_move_worker(WorkerStatus.OFFLINE, new)


@pytest.mark.parametrize("drained", [False, True])
def test_an_offline_worker_that_registers_connects_or_drains(drained):
    back = derive_worker_status(offline=False, drained=drained, has_job=False, stream_open=False)
    assert back in {WorkerStatus.CONNECTING, WorkerStatus.DRAINING}
    assert can_move_worker(WorkerStatus.OFFLINE, back)


def test_a_connecting_worker_cannot_be_given_a_job_before_its_stream_opens():
    assert not can_move_worker(WorkerStatus.CONNECTING, WorkerStatus.BUSY)
    assert can_move_worker(WorkerStatus.IDLE, WorkerStatus.BUSY)


@given(status=st.sampled_from(WorkerStatus))
def test_a_worker_may_always_stay_as_it_is(status):
    assert can_move_worker(status, status)
