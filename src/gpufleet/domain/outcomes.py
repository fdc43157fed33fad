"""What becomes of a job when its current attempt ends: the retry policy, decided once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gpufleet.domain.states import (
    TERMINAL_JOB,
    AttemptStatus,
    EndedAttempt,
    JobStatus,
    RetryOn,
    start_failure_workers,
)

A = AttemptStatus
MAX_UNACKNOWLEDGED_OFFERS = 5  # withdrawn offers a job may have beyond its retries
MAX_PREEMPTIONS = 10  # preempted attempts a job may have beyond its retries


class RetryBudget(Protocol):
    """What the decision reads of a job (`records.Job`)."""

    @property
    def retry_on(self) -> frozenset[RetryOn]: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def attempts(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How the job's current attempt ended."""

    status: AttemptStatus
    number: int
    error: str | None = None
    preempted_by: str | None = None  # the queued job the queue policy stopped it for

    @property
    def reason(self) -> str:
        return self.error or self.status.value


def counted_as(status: AttemptStatus, preempted_by: str | None, *, by_user: bool) -> AttemptStatus:
    """How an attempt's ending counts. One the queue policy preempted (`preempted_by`) counts
    as preempted however it ends (cancelled by an agent that knows no preemption, failed as
    its process was stopped, lost): it is requeued without spending a retry. Only its own
    completion, or its user's cancel, still count as such."""
    if preempted_by is None or status in (A.COMPLETED, A.WITHDRAWN):
        return status
    if status is A.CANCELLED and by_user:
        return status
    return A.PREEMPTED


@dataclass(frozen=True, slots=True)
class Complete:
    pass


@dataclass(frozen=True, slots=True)
class Cancel:
    pass


@dataclass(frozen=True, slots=True)
class Requeue:
    note: str  # the job's `error` while it waits: why its last attempt ended


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str


Decision = Complete | Cancel | Requeue | Fail


def retried(ended: AttemptStatus, retry_on: frozenset[RetryOn]) -> bool:
    """Whether a job whose attempt ended this way (not by its user) may go back to the queue.

    An offer never acknowledged never ran, and a preempted attempt was stopped because its
    machine went away, not for anything the job did: both are offered again (each bounded
    on its own, without spending a retry). A lost attempt, or one the worker stopped itself
    (`cancelled` without a user's cancel: shut down), is retried when `lost` is in `retry_on` (the
    default); a failed process only when `failed` is.
    """
    if ended in (A.WITHDRAWN, A.PREEMPTED):
        return True
    if ended in (A.LOST, A.CANCELLED):
        return RetryOn.LOST in retry_on
    if ended is A.FAILED:
        return RetryOn.FAILED in retry_on
    return False


def needs_history(job: RetryBudget, ended: AttemptStatus, *, by_user: bool) -> bool:
    """Whether `decide` reads the job's past attempts for this ending (saves the read if not)."""
    if ended is A.COMPLETED or (ended is A.CANCELLED and by_user):
        return False
    return retried(ended, job.retry_on)


def decide(
    job: RetryBudget,
    ended: AttemptEnd,
    history: Sequence[EndedAttempt],
    *,
    by_user: bool,
    poison_after_workers: int,
) -> Decision:
    """The job completes, is cancelled, requeued or fails. `history`: every attempt of the
    job, the ended one included; only read when `needs_history` says so."""
    status = counted_as(ended.status, ended.preempted_by, by_user=by_user)
    if status is not ended.status:
        ended = AttemptEnd(status, ended.number, ended.error, ended.preempted_by)
    if ended.status is A.COMPLETED:
        return Complete()
    if ended.status is A.CANCELLED and by_user:
        return Cancel()
    if not needs_history(job, ended.status, by_user=by_user):
        # The job's own process failed, and the submit did not ask for `retry_on: failed`.
        return Fail(ended.reason)
    return _retry_or_fail(job, ended, history, poison_after_workers)


def _retry_or_fail(
    job: RetryBudget, ended: AttemptEnd, history: Sequence[EndedAttempt], poison_after: int
) -> Decision:
    reason = ended.reason
    poisoned = start_failure_workers(history)
    if len(poisoned) >= poison_after:
        return Fail(
            f"could not start on {len(poisoned)} different workers, so it is not tried again "
            f"(--poison-after-workers); fix the job and submit it again. Last error: {reason}"
        )
    unacknowledged = sum(1 for a in history if a.status is A.WITHDRAWN)
    preempted = sum(1 for a in history if a.status is A.PREEMPTED)
    # An offer the worker never acknowledged never ran, and a preempted attempt was stopped
    # by its machine going away: neither spends a retry, but a job no worker ever
    # acknowledges, or one preempted over and over, still ends.
    ran = job.attempts - unacknowledged - preempted
    if unacknowledged > MAX_UNACKNOWLEDGED_OFFERS:
        return Fail(
            f"{reason} (offered {unacknowledged} times without an acknowledgement; check "
            "that the workers receive their event streams)"
        )
    if preempted > MAX_PREEMPTIONS:
        return Fail(
            f"{reason} (preempted {preempted} times; run it on workers that are not "
            "reclaimed as often, or submit it again)"
        )
    if ran < job.max_retries + 1:
        return Requeue(f"attempt {ended.number} {ended.status.value}: {reason}")
    return Fail(f"{reason} (attempt {ran} of {job.max_retries + 1}; no retries left)")


def lost_at(
    last_heard: datetime | None,
    began: datetime,
    now: datetime,
    last_committed: datetime | None = None,
) -> datetime:
    """When an attempt found lost ended: at its last sign of life (its worker's last
    heartbeat, or the last checkpoint it committed, whichever came later), not when the
    sweep noticed the silence a heartbeat timeout later; never before the attempt began, nor
    after now. Its clock ("Ran") stops there, and a checkpoint it committed while live is
    still before its end (the resume rule draws only on those)."""
    signs = [t for t in (last_heard, last_committed) if t is not None]
    if not signs:
        return now
    return min(now, max(began, *signs))


def error_is_note(status: JobStatus) -> bool:
    """A job's `error` while it waits or runs again is the note of a `Requeue`: why its
    last attempt ended (preempted, lost), not a failure of the job; shown as a note."""
    return status not in TERMINAL_JOB


RESUMED_AFTER = frozenset({A.LOST, A.PREEMPTED})  # endings the next attempt resumes after


class PastAttempt(Protocol):
    """What the resume rule reads of an attempt (`records.Attempt`)."""

    @property
    def id(self) -> str: ...
    @property
    def number(self) -> int: ...
    @property
    def status(self) -> AttemptStatus: ...


def resume_sources(history: Sequence[PastAttempt]) -> list[str]:
    """The attempts whose checkpoints the job's next attempt may resume from: every earlier
    one, when the last that reached its worker (withdrawn offers never did) was lost or
    preempted; none otherwise (a fresh job, or one retried after its own process failed).
    Which checkpoint counts is the store's to say: the newest committed while its attempt
    was still the job's live one (`latest_checkpoint`), never one from after it was fenced."""
    reached = [a for a in history if a.status is not A.WITHDRAWN]
    if not reached:
        return []
    last = max(reached, key=lambda a: a.number)
    return [a.id for a in reached] if last.status in RESUMED_AFTER else []
