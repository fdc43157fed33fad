"""Worker, job and attempt lifecycles as explicit transition tables."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from gpufleet.errors import Conflict, InvalidInput


class WorkerStatus(StrEnum):
    CONNECTING = "connecting"
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"
    OFFLINE = "offline"


class JobStatus(StrEnum):
    PENDING_APPROVAL = "pending_approval"  # an approval rule holds it (docs/scheduling.md)
    QUEUED = "queued"
    OFFERED = "offered"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    OFFERED = "offered"  # sent to the worker, not yet acknowledged
    ACKNOWLEDGED = "acknowledged"  # the worker has it and is starting it
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # the job itself failed (exit code, timeout)
    CANCELLED = "cancelled"
    LOST = "lost"  # the worker went silent or came back without it
    WITHDRAWN = "withdrawn"  # never acknowledged within the ack timeout
    PREEMPTED = "preempted"  # the worker stopped it: its machine is going away (spot notice)


class NodeState(StrEnum):
    """Where one node of a gang's attempt stands (`attempt_nodes`). Offered with the attempt;
    the rendezvous (a later step of #35) moves it: every node acknowledges, rank 0's worker
    names a free MASTER_PORT, and the nodes start only once all N acknowledged."""

    OFFERED = "offered"
    ACKNOWLEDGED = "acknowledged"
    RUNNING = "running"
    ENDED = "ended"


class RetryOn(StrEnum):
    """Which ended attempts a job is retried after (while `max_retries` lasts)."""

    LOST = "lost"  # the worker went away, or stopped the job itself (preempted, shut down)
    FAILED = "failed"  # the job's own process failed (a non-zero exit, a timeout)


RETRY_DEFAULT = frozenset({RetryOn.LOST})


class Target(StrEnum):
    WORKER = "worker"
    LOCAL = "local"
    AUTO = "auto"


class WorkerType(StrEnum):
    PERSISTENT = "persistent"
    EPHEMERAL = "ephemeral"


W = WorkerStatus
# The moves the server's changes of a worker's facts make (see `derive_worker_status`):
# only a claim gives an idle worker a job (a connecting one has no stream to be offered on),
# and an offline worker comes back only by registering, which opens no stream and gives no
# job: it is connecting (or draining) until its stream opens.
WORKER_TRANSITIONS: dict[WorkerStatus, frozenset[WorkerStatus]] = {
    W.CONNECTING: frozenset({W.IDLE, W.DRAINING, W.OFFLINE}),
    W.IDLE: frozenset({W.BUSY, W.DRAINING, W.OFFLINE, W.CONNECTING}),
    W.BUSY: frozenset({W.IDLE, W.DRAINING, W.OFFLINE, W.CONNECTING}),
    W.DRAINING: frozenset({W.IDLE, W.BUSY, W.CONNECTING, W.OFFLINE}),
    W.OFFLINE: frozenset({W.CONNECTING, W.DRAINING}),
}

J = JobStatus
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    J.PENDING_APPROVAL: frozenset({J.QUEUED, J.CANCELLED}),  # approved; rejected or cancelled
    J.QUEUED: frozenset({J.OFFERED, J.CANCELLED}),
    J.OFFERED: frozenset({J.RUNNING, J.QUEUED, J.COMPLETED, J.FAILED, J.CANCELLED}),
    J.RUNNING: frozenset({J.QUEUED, J.COMPLETED, J.FAILED, J.CANCELLED}),
    J.COMPLETED: frozenset(),
    J.FAILED: frozenset(),
    J.CANCELLED: frozenset(),
}

A = AttemptStatus
ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    A.OFFERED: frozenset(
        {
            A.ACKNOWLEDGED,
            A.RUNNING,
            A.COMPLETED,
            A.FAILED,
            A.CANCELLED,
            A.LOST,
            A.WITHDRAWN,
            A.PREEMPTED,
        }
    ),
    A.ACKNOWLEDGED: frozenset({A.RUNNING, A.COMPLETED, A.FAILED, A.CANCELLED, A.LOST, A.PREEMPTED}),
    A.RUNNING: frozenset({A.COMPLETED, A.FAILED, A.CANCELLED, A.LOST, A.PREEMPTED}),
    A.COMPLETED: frozenset(),
    A.FAILED: frozenset(),
    A.CANCELLED: frozenset(),
    A.LOST: frozenset(),
    A.WITHDRAWN: frozenset(),
    A.PREEMPTED: frozenset(),
}

TERMINAL_JOB = frozenset(s for s, nxt in JOB_TRANSITIONS.items() if not nxt)
# SimpleTuner's Job Queue names for ours, where they differ (its `pending` is our queued,
# its `blocked` our pending_approval): its clients may filter the queue by them.
SIMPLETUNER_STATUS: dict[JobStatus, str] = {J.QUEUED: "pending", J.PENDING_APPROVAL: "blocked"}


def parse_job_status(name: str) -> JobStatus:
    """A job status by our name or SimpleTuner's."""
    for ours, theirs in SIMPLETUNER_STATUS.items():
        if name == theirs:
            return ours
    try:
        return JobStatus(name)
    except ValueError:
        allowed = ", ".join([*(s.value for s in JobStatus), *SIMPLETUNER_STATUS.values()])
        raise InvalidInput(f"unknown job status {name!r}; use one of: {allowed}") from None


WAITING_JOB = frozenset({J.PENDING_APPROVAL, J.QUEUED})  # not on a worker, not ended
PLACED_JOB = frozenset({J.OFFERED, J.RUNNING})  # on a worker: offered to it or running there
ACTIVE_ATTEMPT = frozenset({A.OFFERED, A.ACKNOWLEDGED, A.RUNNING})
TAKEN_ATTEMPT = frozenset({A.ACKNOWLEDGED, A.RUNNING})  # its worker has it, and it goes on
TERMINAL_ATTEMPT = frozenset(s for s, nxt in ATTEMPT_TRANSITIONS.items() if not nxt)


def derive_worker_status(
    *, offline: bool, drained: bool, has_job: bool, stream_open: bool
) -> WorkerStatus:
    """A worker's status follows from four facts; storing it is only for queries."""
    if offline:
        return W.OFFLINE
    if drained:
        return W.DRAINING
    if has_job:
        return W.BUSY
    return W.IDLE if stream_open else W.CONNECTING


# A worker's columns no match reads: a change of these alone lets it run nothing new.
_UNMATCHED = frozenset({"last_heartbeat", "gpu_stats", "gpu_stats_at"})


def may_newly_fit(was: WorkerStatus, now: WorkerStatus, changed: Iterable[str]) -> bool:
    """Whether a worker's change may let it run a queued job it could not run before: it is
    idle now and was not, or something a match reads changed."""
    if now is not W.IDLE:
        return False
    return was is not W.IDLE or not set(changed) <= _UNMATCHED


def can_delete_worker(status: WorkerStatus, *, ever_connected: bool) -> bool:
    """Only an offline worker may be deleted, and one that never connected counts as offline
    (as GitHub deletes a runner that never came online): no agent holds its token yet, so
    nothing runs there to lose, whatever its status says (an admin may have drained it)."""
    return status is W.OFFLINE or not ever_connected


def can_move_worker(old: WorkerStatus, new: WorkerStatus) -> bool:
    return old == new or new in WORKER_TRANSITIONS[old]


def can_move_job(old: JobStatus, new: JobStatus) -> bool:
    return new in JOB_TRANSITIONS[old]


def can_move_attempt(old: AttemptStatus, new: AttemptStatus) -> bool:
    return new in ATTEMPT_TRANSITIONS[old]


def check_job_move(job_id: str, old: JobStatus, new: JobStatus) -> None:
    if not can_move_job(old, new):
        raise Conflict(f"job {job_id} is {old} and cannot become {new}")


# What a worker may report about its job, and the attempt status each one means.
REPORTED_STATUS: dict[str, AttemptStatus] = {
    "acknowledged": A.ACKNOWLEDGED,
    "starting": A.ACKNOWLEDGED,  # the SimpleTuner agent's only acknowledgement
    "running": A.RUNNING,
    "training": A.RUNNING,  # the SimpleTuner agent's word for running
    "completed": A.COMPLETED,
    "failed": A.FAILED,
    "cancelled": A.CANCELLED,
    "preempted": A.PREEMPTED,  # docs/artifacts.md: the machine is going away
}
# The attempt statuses only a worker's report sets: an attempt in one reached its worker.
REPORTED_ATTEMPT = frozenset(REPORTED_STATUS.values())


def parse_reported_status(value: str) -> AttemptStatus:
    try:
        return REPORTED_STATUS[value]
    except KeyError:
        allowed = ", ".join(sorted(REPORTED_STATUS))
        raise InvalidInput(f"unknown job status {value!r}; send one of: {allowed}") from None


class EndedAttempt(Protocol):
    """What the poison-job rule reads of an attempt (`records.Attempt`)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def status(self) -> AttemptStatus: ...
    @property
    def acknowledged_at(self) -> datetime | None: ...
    @property
    def started_at(self) -> datetime | None: ...


def failed_to_start(attempt: EndedAttempt) -> bool:
    """Whether an attempt ended without its process ever running (no `running` report).

    Failed before running: the worker could not start it (a bad offer, a missing executable).
    Lost after it was acknowledged but before running: the worker died starting it. An offer
    never acknowledged does not count: its worker may just have vanished, not of this job.
    """
    if attempt.started_at is not None:
        return False
    if attempt.status is A.FAILED:
        return True
    return attempt.status is A.LOST and attempt.acknowledged_at is not None


def start_failure_workers(history: Iterable[EndedAttempt]) -> frozenset[str]:
    """The workers a job failed to start on: at `--poison-after-workers` of them, the job is
    poison and fails, whatever its retries say (it would only go on to kill or fail more)."""
    return frozenset(a.worker_id for a in history if failed_to_start(a))


def workers_to_avoid(history: Iterable[EndedAttempt]) -> frozenset[str]:
    """The workers a requeued job goes to only when no other idle worker fits: those it
    failed to start on, and those that preempted it (their machine is going away)."""
    return frozenset(
        a.worker_id for a in history if failed_to_start(a) or a.status is AttemptStatus.PREEMPTED
    )
