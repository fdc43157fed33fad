"""What becomes of a job when its attempt ends: `outcomes.decide`, property-tested."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import outcomes
from gpufleet.domain.outcomes import (
    MAX_PREEMPTIONS,
    MAX_UNACKNOWLEDGED_OFFERS,
    AttemptEnd,
    Cancel,
    Complete,
    Decision,
    Fail,
    Requeue,
    decide,
    needs_history,
    resume_sources,
)
from gpufleet.domain.states import (
    RETRY_DEFAULT,
    TERMINAL_ATTEMPT,
    AttemptStatus,
    RetryOn,
    failed_to_start,
)

A = AttemptStatus
T0 = datetime(2025, 1, 1, tzinfo=UTC)
ENDINGS = sorted(TERMINAL_ATTEMPT)
NOT_COMPLETED = [s for s in ENDINGS if s is not A.COMPLETED]


@dataclass(frozen=True)
class Budget:
    retry_on: frozenset[RetryOn] = RETRY_DEFAULT
    max_retries: int = 2
    attempts: int = 1


@dataclass(frozen=True)
class Past:
    worker_id: str
    status: AttemptStatus
    acknowledged_at: datetime | None
    started_at: datetime | None


budgets = st.builds(
    Budget,
    retry_on=st.frozensets(st.sampled_from(RetryOn)),
    max_retries=st.integers(0, 5),
    attempts=st.integers(1, 12),
)
ends = st.builds(
    AttemptEnd,
    status=st.sampled_from(ENDINGS),
    number=st.integers(1, 12),
    error=st.none() | st.text(min_size=1, max_size=10),
)
pasts = st.lists(
    st.builds(
        Past,
        worker_id=st.sampled_from(["w_1", "w_2", "w_3", "w_4"]),
        status=st.sampled_from(ENDINGS),
        acknowledged_at=st.none() | st.just(T0),
        started_at=st.none() | st.just(T0),
    ),
    max_size=10,
)
poison_limits = st.integers(1, 4)


def run(job: Budget, end: AttemptEnd, history: list[Past], by_user: bool = False) -> Decision:
    return decide(job, end, history, by_user=by_user, poison_after_workers=3)


# ---- properties ---------------------------------------------------------------------------


@given(job=budgets, end=ends, history=pasts, by_user=st.booleans(), poison=poison_limits)
def test_a_successful_attempt_always_completes_the_job(job, end, history, by_user, poison):
    end = AttemptEnd(A.COMPLETED, end.number, end.error)
    assert decide(job, end, history, by_user=by_user, poison_after_workers=poison) == Complete()


@given(job=budgets, number=st.integers(1, 9), history=pasts, poison=poison_limits)
def test_a_job_its_user_cancels_is_cancelled_never_requeued(job, number, history, poison):
    end = AttemptEnd(A.CANCELLED, number, "cancelled by alice")
    assert decide(job, end, history, by_user=True, poison_after_workers=poison) == Cancel()


@given(job=budgets, end=ends, history=pasts, by_user=st.booleans(), poison=poison_limits)
def test_only_a_user_cancel_cancels_the_job(job, end, history, by_user, poison):
    decision = decide(job, end, history, by_user=by_user, poison_after_workers=poison)
    assert isinstance(decision, Cancel) == (by_user and end.status is A.CANCELLED)


@given(job=budgets, end=ends, history=pasts, by_user=st.booleans(), poison=poison_limits)
def test_a_job_is_requeued_only_after_an_ending_its_retry_on_names(
    job, end, history, by_user, poison
):
    decision = decide(job, end, history, by_user=by_user, poison_after_workers=poison)
    if isinstance(decision, Requeue):
        assert not (by_user and end.status is A.CANCELLED)
        assert (
            end.status in {A.WITHDRAWN, A.PREEMPTED}
            or (end.status in {A.LOST, A.CANCELLED} and RetryOn.LOST in job.retry_on)
            or (end.status is A.FAILED and RetryOn.FAILED in job.retry_on)
        )


@given(job=budgets, end=ends, history=pasts, by_user=st.booleans())
def test_history_changes_nothing_where_the_decision_does_not_read_it(job, end, history, by_user):
    if needs_history(job, end.status, by_user=by_user):
        return
    assert run(job, end, history, by_user) == run(job, end, [], by_user)


@given(job=budgets, end=ends, history=pasts, poison=poison_limits)
def test_a_job_that_failed_to_start_on_enough_workers_is_never_requeued(job, end, history, poison):
    decision = decide(job, end, history, by_user=False, poison_after_workers=poison)
    workers = {a.worker_id for a in history if failed_to_start(a)}
    if len(workers) >= poison and needs_history(job, end.status, by_user=False):
        assert isinstance(decision, Fail)
        assert f"could not start on {len(workers)} different workers" in decision.reason


@settings(max_examples=300)
@given(
    retry_on=st.frozensets(st.sampled_from(RetryOn)),
    max_retries=st.integers(0, 4),
    endings=st.lists(st.sampled_from(NOT_COMPLETED), min_size=1, max_size=30),
)
def test_requeues_never_exceed_the_retry_budget(retry_on, max_retries, endings):
    """Attempts end one after another (each on its own worker, having run): the job runs at
    most `max_retries + 1` times, and is offered unacknowledged at most a bounded number."""
    history: list[Past] = []
    for number, status in enumerate(endings, start=1):
        history.append(Past(f"w_{number}", status, T0, T0))
        job = Budget(retry_on, max_retries, attempts=number)
        decision = decide(
            job, AttemptEnd(status, number), history, by_user=False, poison_after_workers=99
        )
        if not isinstance(decision, Requeue):
            break
    withdrawn = sum(1 for a in history if a.status is A.WITHDRAWN)
    preempted = sum(1 for a in history if a.status is A.PREEMPTED)
    assert len(history) - withdrawn - preempted <= max_retries + 1
    assert withdrawn <= MAX_UNACKNOWLEDGED_OFFERS + 1
    assert preempted <= MAX_PREEMPTIONS + 1


@settings(max_examples=300)
@given(
    retry_on=st.frozensets(st.sampled_from(RetryOn)),
    max_retries=st.integers(0, 4),
    ran=st.lists(st.sampled_from([A.LOST, A.FAILED, A.CANCELLED]), max_size=4),
    preemptions=st.integers(1, MAX_PREEMPTIONS),
    order=st.randoms(use_true_random=False),
)
def test_a_preemption_requeues_without_spending_a_retry(
    retry_on, max_retries, ran, preemptions, order
):
    """However many runs the job spent and however its retries are set, a preempted attempt
    goes back to the queue while preemptions stay within their own bound, and the retries
    left after it are the ones left before it."""
    ran = ran[:max_retries]  # runs that left the budget open
    history = [Past(f"w_{n}", s, T0, T0) for n, s in enumerate(ran)]
    history += [Past("w_p", A.PREEMPTED, T0, T0) for _ in range(preemptions)]
    order.shuffle(history)
    job = Budget(retry_on, max_retries, attempts=len(history))
    decision = run(job, AttemptEnd(A.PREEMPTED, len(history), "spot notice"), history)
    assert decision == Requeue(f"attempt {len(history)} preempted: spot notice")
    # The next ending of a run sees the same budget as if no preemption had happened.
    lost = Past("w_x", A.LOST, T0, T0)
    with_preemptions = run(
        Budget(retry_on, max_retries, attempts=len(history) + 1),
        AttemptEnd(A.LOST, len(history) + 1),
        [*history, lost],
    )
    without = run(
        Budget(retry_on, max_retries, attempts=len(ran) + 1),
        AttemptEnd(A.LOST, len(history) + 1),
        [a for a in history if a.status is not A.PREEMPTED] + [lost],
    )
    assert type(with_preemptions) is type(without)


@given(max_retries=st.integers(0, 5), attempts=st.integers(1, 8), history=pasts)
def test_a_lost_attempt_is_retried_by_default_while_retries_last(max_retries, attempts, history):
    history = [
        a for a in history if not failed_to_start(a) and a.status not in {A.WITHDRAWN, A.PREEMPTED}
    ]
    job = Budget(RETRY_DEFAULT, max_retries, attempts)
    decision = run(job, AttemptEnd(A.LOST, attempts, "worker went silent"), history)
    assert isinstance(decision, Requeue) == (attempts <= max_retries)


@given(job=budgets, number=st.integers(1, 9), history=pasts)
def test_a_failed_process_is_not_retried_unless_retry_on_names_failed(job, number, history):
    decision = run(job, AttemptEnd(A.FAILED, number, "exited with code 1"), history)
    if RetryOn.FAILED not in job.retry_on:
        assert decision == Fail("exited with code 1")


# ---- examples -----------------------------------------------------------------------------


def test_a_lost_attempt_is_requeued_with_why_it_ended():
    decision = run(Budget(attempts=1), AttemptEnd(A.LOST, 1, "worker went silent"), [])
    assert decision == Requeue("attempt 1 lost: worker went silent")


def test_a_worker_stopping_the_job_itself_is_retried_like_a_lost_attempt():
    decision = run(Budget(attempts=2), AttemptEnd(A.CANCELLED, 2, "preempted"), [])
    assert decision == Requeue("attempt 2 cancelled: preempted")


def test_a_lost_attempt_past_the_budget_fails_saying_so():
    decision = run(Budget(max_retries=1, attempts=2), AttemptEnd(A.LOST, 2), [])
    assert decision == Fail("lost (attempt 2 of 2; no retries left)")


def test_a_withdrawn_offer_does_not_spend_a_retry():
    history = [Past("w_1", A.WITHDRAWN, None, None)]
    job = Budget(frozenset(), max_retries=0, attempts=1)
    assert run(job, AttemptEnd(A.WITHDRAWN, 1), history) == Requeue(
        "attempt 1 withdrawn: withdrawn"
    )


def test_too_many_unacknowledged_offers_fail_the_job():
    history = [Past("w_1", A.WITHDRAWN, None, None)] * (MAX_UNACKNOWLEDGED_OFFERS + 1)
    job = Budget(max_retries=0, attempts=len(history))
    decision = run(job, AttemptEnd(A.WITHDRAWN, len(history), "not acknowledged"), history)
    assert isinstance(decision, Fail)
    assert decision.reason.startswith("not acknowledged (offered 6 times without")


def test_too_many_preemptions_fail_the_job_saying_so():
    history = [Past("w_1", A.PREEMPTED, T0, T0)] * (MAX_PREEMPTIONS + 1)
    job = Budget(max_retries=5, attempts=len(history))
    decision = run(job, AttemptEnd(A.PREEMPTED, len(history), "spot notice"), history)
    assert isinstance(decision, Fail)
    assert decision.reason.startswith(f"spot notice (preempted {MAX_PREEMPTIONS + 1} times")


def test_a_preempted_attempt_is_requeued_even_with_an_empty_retry_on():
    history = [Past("w_1", A.PREEMPTED, T0, T0)]
    job = Budget(frozenset(), max_retries=0, attempts=1)
    assert run(job, AttemptEnd(A.PREEMPTED, 1), history) == Requeue(
        "attempt 1 preempted: preempted"
    )


@pytest.mark.parametrize("status", [A.LOST, A.CANCELLED])
def test_with_an_empty_retry_on_even_a_lost_attempt_fails(status):
    assert run(Budget(frozenset()), AttemptEnd(status, 1), []) == Fail(status.value)


def test_a_failed_process_is_retried_when_retry_on_names_failed():
    job = Budget(frozenset({RetryOn.FAILED}), attempts=1)
    decision = run(job, AttemptEnd(A.FAILED, 1, "exited with code 1"), [])
    assert decision == Requeue("attempt 1 failed: exited with code 1")


def test_failing_to_start_on_three_workers_makes_the_job_poison():
    history = [Past(f"w_{n}", A.FAILED, T0, None) for n in (1, 2, 3)]
    job = Budget(frozenset({RetryOn.FAILED}), max_retries=9, attempts=3)
    decision = run(job, AttemptEnd(A.FAILED, 3, "no such file"), history)
    assert isinstance(decision, Fail)
    assert decision.reason.startswith("could not start on 3 different workers")
    assert decision.reason.endswith("Last error: no such file")


def test_on_its_last_retry_a_job_poison_on_enough_workers_gives_the_poison_reason():
    """Both rules end it (no retries left, and the third worker it could not start on): the
    poison reason says more, so it is the one given. The chaos tier met this case."""
    history = [Past(f"w_{n % 3}", A.FAILED, T0, None) for n in range(3)]
    job = Budget(frozenset({RetryOn.FAILED}), max_retries=2, attempts=3)
    decision = run(job, AttemptEnd(A.FAILED, 3, "no such file"), history)
    assert isinstance(decision, Fail)
    assert decision.reason.startswith("could not start on 3 different workers")


# ---- where the next attempt resumes from --------------------------------------------------


@dataclass(frozen=True)
class Ran:
    id: str
    number: int
    status: AttemptStatus


@given(endings=st.lists(st.sampled_from(NOT_COMPLETED), max_size=8))
def test_an_attempt_resumes_only_after_a_lost_or_preempted_one_drawing_on_every_earlier(
    endings,
):
    history = [Ran(f"a_{n}", n, status) for n, status in enumerate(endings, start=1)]
    sources = resume_sources(history)
    reached = [a for a in history if a.status is not A.WITHDRAWN]
    if reached and reached[-1].status in {A.LOST, A.PREEMPTED}:
        assert sources == [a.id for a in reached]
    else:
        assert sources == []
    assert not {a.id for a in history if a.status is A.WITHDRAWN} & set(sources)


def test_a_withdrawn_offer_after_a_lost_attempt_does_not_stop_the_resume():
    history = [Ran("a_1", 1, A.LOST), Ran("a_2", 2, A.WITHDRAWN)]
    assert resume_sources(history) == ["a_1"]
    assert resume_sources([*history, Ran("a_3", 3, A.FAILED)]) == []


@pytest.mark.parametrize("ended", [A.CANCELLED, A.FAILED, A.LOST, A.PREEMPTED])
def test_an_attempt_the_policy_preempted_is_requeued_without_spending_a_retry(
    ended: AttemptStatus,
) -> None:
    # No retries left, and `failed` not even retried: the preemption still requeues it.
    job = Budget(retry_on=frozenset(), max_retries=0, attempts=1)
    end = AttemptEnd(ended, 1, "stopped", preempted_by="j_urgent")
    history = [Past("w1", A.PREEMPTED, T0, T0)]

    decision = decide(job, end, history, by_user=False, poison_after_workers=3)

    assert isinstance(decision, Requeue)
    assert decide(job, end, history, by_user=True, poison_after_workers=3) == (
        Cancel() if ended is A.CANCELLED else decision
    )


def test_a_preempted_attempt_that_completed_anyway_completes_the_job() -> None:
    end = AttemptEnd(A.COMPLETED, 1, None, preempted_by="j_urgent")

    assert decide(Budget(), end, [], by_user=False, poison_after_workers=3) == Complete()


def test_a_lost_attempt_ends_at_its_last_sign_of_life_a_checkpoint_included():
    """#33.3's clock stops at the last heartbeat; a checkpoint committed after it (while the
    attempt was live) moves the end past it, so the resume rule still draws on it."""
    began = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    heard, committed, now = (began + timedelta(seconds=s) for s in (30, 31, 190))
    assert outcomes.lost_at(heard, began, now) == heard
    assert outcomes.lost_at(heard, began, now, committed) == committed
    assert outcomes.lost_at(None, began, now, committed) == committed
    assert outcomes.lost_at(None, began, now) == now
    assert outcomes.lost_at(began - timedelta(seconds=5), began, now) == began
