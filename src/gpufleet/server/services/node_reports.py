"""What one node of a multi-node (gang) attempt reports, fenced by attempt and node rank:
its acknowledgement (the two-phase start: `domain/rendezvous.py`), that it runs, and how it
ended. The job runs when every node runs; its progress comes from rank 0; a node that fails
or stops ends the whole attempt, and the others are told to stop (`lifecycle.end_attempt`).
The job completes with rank 0; a node still going then keeps its worker until it reports
its own end, or `OUTLIVE_GRACE` passes (`health.stop_outliving_nodes`).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from dataclasses import dataclass
from typing import Any

from gpufleet.domain import rendezvous
from gpufleet.domain.audit_events import SYSTEM_ACTOR, worker_actor
from gpufleet.domain.records import Attempt, AttemptNode, Job, Worker
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    AttemptStatus,
    JobStatus,
    NodeState,
    parse_reported_status,
)
from gpufleet.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import worker_topic
from gpufleet.server.services import attempt_tokens, batches, offers, reports
from gpufleet.server.services.lifecycle import move_attempt, release_worker
from gpufleet.server.services.reports import StatusReport
from gpufleet.store.queries.gangs import NodeWrite

log = logging.getLogger("gpufleet.server.node_reports")


@dataclass(frozen=True, slots=True)
class NodeReport:
    report: StatusReport
    rank: int
    port: int | None = None  # rank 0's acknowledgement: the MASTER_PORT it chose
    address: str | None = None  # the worker's --advertise-addr; None: where it called from


async def report_node(
    ctx: Context,
    worker: Worker,
    job_id: str,
    node: NodeReport,
    client: str | None,
    attempt_token: str | None = None,
) -> JobStatus:
    new = parse_reported_status(node.report.status)
    if new is AttemptStatus.ACKNOWLEDGED and (
        problem := rendezvous.ack_problem(node.rank, node.port)
    ):
        raise InvalidInput(problem)
    if rendezvous.frees_own_only(node.rank, new) and ctx.store.dialect == "postgresql":
        # A gang's start, or its nodes' completions: each report waits on the job's lock
        # (a 32-node gang's 31 completions, one commit after another, held up its last
        # `running` reports for a second); applied together
        outcome = await batches.together(
            ctx,
            job_id,
            worker.id,
            lambda tx: _apply(tx, worker, job_id, node, client, new, attempt_token, _read(tx)),
        )
    else:
        async with transaction(ctx) as tx:
            outcome = await _apply(tx, worker, job_id, node, client, new, attempt_token)
    status, attempt, refused, freed, requeued = outcome
    if refused is not None:
        raise await reports.refuse(ctx, worker, *refused)
    await reports.after(ctx, worker, job_id, attempt, new, freed=freed, requeued=requeued)
    return status


_Outcome = tuple[JobStatus, Attempt, tuple[Job, Attempt] | None, bool, bool]


async def _apply(
    tx: Tx,
    worker: Worker,
    job_id: str,
    node: NodeReport,
    client: str | None,
    new: AttemptStatus,
    attempt_token: str | None,
    read: Read | None = None,
) -> _Outcome:
    """The report's writes in `tx`: the job's status after it, the attempt, the job and
    attempt it was refused for (None: taken), whether it freed the worker and requeued the
    job. `read`: what the report before it in `tx` left (a batch's)."""
    seen = read.take() if read is not None else None
    if read is not None and (seen is None or new not in rendezvous.STARTS):
        # the nodes are read again, or a node's end is written at once: after the batch's
        # writes (its own `running` may be among them)
        await read.flush(tx)
    refused: tuple[Job, Attempt] | None = None
    freed = requeued = False
    locked = await _lock_workers(tx, worker, job_id, node, new)
    job, attempt, own, nodes = await _node(tx, locked or worker, job_id, node, attempt_token, seen)
    status = job.status
    live = (
        attempt.id == job.current_attempt_id
        and attempt.status in ACTIVE_ATTEMPT
        and own.state is not NodeState.ENDED
    )
    late = rendezvous.late_report(attempt.status, own.state, new)
    if not live and attempt.id == job.current_attempt_id and late is not None:
        if late is rendezvous.Late.ENDS:  # it outlived rank 0's completion: now it ends
            freed = await _ended_late(tx, job, attempt, own, new, node.report, locked)
    elif not live:
        if new in rendezvous.ENDS_ATTEMPT | {AttemptStatus.COMPLETED}:
            freed = await release_worker(tx, worker.id, attempt, locked)  # a repeat, or done
        else:
            refused = (job, attempt)
    elif new is AttemptStatus.ACKNOWLEDGED:
        await _acknowledge(tx, job, attempt, nodes, own, node, client, read)
    elif new is AttemptStatus.RUNNING:
        status = await _running(tx, job, attempt, nodes, own, node.report, locked, read)
    elif own.rank == 0 or new in rendezvous.ENDS_ATTEMPT:
        report = node.report
        if own.rank > 0:  # its end is the attempt's: say which node
            why = f"node {own.rank} (worker {worker.id}) {new.value}"
            report = _with_error(report, f"{why}: {report.error}" if report.error else why)
        status = await reports.apply(tx, job, attempt, new, report, locked, own.rank)
        freed = status not in (JobStatus.OFFERED, JobStatus.RUNNING)
        requeued = status is JobStatus.QUEUED
    else:  # a node besides rank 0 completed: it alone is done
        freed = await end_node(tx, attempt, own, locked)
    return status, attempt, refused, freed, requeued


async def end_node(
    tx: Tx,
    attempt: Attempt,
    node: AttemptNode,
    locked: Worker | None = None,
    error: str | None = None,
) -> bool:
    """One node of a gang's attempt ends alone (it completed while the others go on, or it
    outlived its completed attempt): its row ends, and its worker is freed if it still
    holds the attempt (True then)."""
    await tx.q.update_attempt_node(
        attempt.id, node.rank, state=NodeState.ENDED, ended_at=tx.now, error=error
    )
    return await release_worker(tx, node.worker_id, attempt, locked)


async def _ended_late(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    own: AttemptNode,
    new: AttemptStatus,
    report: StatusReport,
    locked: Worker | None,
) -> bool:
    """A node that outlived its completed attempt reports its end: the job stays completed;
    a failure is noted on the node and in the audit log."""
    error = rendezvous.late_failure(own.rank, own.worker_id, new, report.error)
    tx.audit(
        "job.node_ended",
        worker_actor(own.worker_id),
        job.id,
        attempt_id=attempt.id,
        node_rank=own.rank,
        outcome=new.value,
        exit_code=report.exit_code,
        error=error,
    )
    if error is not None:
        log.warning("job %s: %s", job.id, error)
    return await end_node(tx, attempt, own, locked, error)


async def _lock_workers(
    tx: Tx, worker: Worker, job_id: str, node: NodeReport, new: AttemptStatus
) -> Worker | None:
    """Lock every node's worker, in id order, before the job (lifecycle's lock order): a
    report that ends the attempt frees them all, and two nodes reporting at once must not
    each hold what the other waits for. A report that frees no worker but its own (a start
    report; a completion besides rank 0's: `rendezvous.frees_own_only`) locks the
    reporter's worker alone, then the job, which orders it among the gang's other reports
    (#35: each of a 32-node gang's 64 start reports locked all 32; its 31 completions, each
    holding all 32 rows while it waited for the job, held up the next gang's acknowledgement
    on a worker they had freed by seconds). The reporter's row as locked."""
    # SQLite: one transaction writes at a time, none waits on another
    if tx.q.locks_rows and not rendezvous.frees_own_only(node.rank, new):
        ids = {worker.id}
        job = await tx.q.get_job(job_id)
        wanted = node.report.attempt_id or (job.current_attempt_id if job is not None else None)
        if job is not None and job.nodes > 1 and wanted:
            ids.update(n.worker_id for n in await tx.q.attempt_nodes(wanted))
        await tx.q.lock_workers(ids)
    return await tx.q.get_worker(worker.id, lock=True)


async def _node(
    tx: Tx,
    worker: Worker,
    job_id: str,
    node: NodeReport,
    attempt_token: str | None,
    seen: Seen | None = None,
) -> tuple[Job, Attempt, AttemptNode, list[AttemptNode]]:
    """The job, the attempt, the worker's own node it reports on and every node (read under
    the job's lock, which every writer of the nodes holds; or as `seen` by the report before
    it in the transaction, for the same attempt); Forbidden for a worker that is not that
    node."""
    if seen is None or (node.report.attempt_id or seen[0].current_attempt_id) != seen[1].id:
        seen = await _read_node(tx, job_id, node.report.attempt_id)
    job, attempt, nodes = seen
    fenced = rendezvous.fence(nodes, worker.id, node.rank)
    if isinstance(fenced, str):
        raise Forbidden(f"job {job_id}, attempt {attempt.id}: {fenced}")
    attempt_tokens.check(tx.key, worker, attempt.id, attempt_token)
    return job, attempt, fenced, nodes


async def _read_node(tx: Tx, job_id: str, attempt_id: str | None) -> Seen:
    job = await tx.q.get_job(job_id, lock=True)
    if job is None:
        raise NotFound(f"no job {job_id}; it may have been deleted")
    wanted = attempt_id or job.current_attempt_id
    attempt = await tx.q.get_attempt(wanted) if wanted else None
    if attempt is None or attempt.job_id != job.id:
        raise Forbidden(
            f"job {job_id} has no attempt {wanted} with nodes; name the attempt_id of the offer"
        )
    return job, attempt, await tx.q.attempt_nodes(attempt.id)


async def _acknowledge(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    nodes: list[AttemptNode],
    own: AttemptNode,
    node: NodeReport,
    client: str | None,
    read: Read | None = None,
) -> None:
    """Record the node's acknowledgement; once every node acknowledged, start them all. A
    repeated one after the start is answered with the node's start event again (it may
    have missed it)."""
    if own.state is NodeState.OFFERED:
        address = node.address or client
        if not address:
            raise InvalidInput(
                "the orchestrator cannot tell this worker's address: set --advertise-addr"
            )
        values: dict[str, Any] = {
            "state": NodeState.ACKNOWLEDGED,
            "acknowledged_at": tx.now,
            "address": address,
            "port": node.port if own.rank == 0 else None,
        }
        await _write_node(tx, read, attempt.id, own.rank, values)
        nodes = _replaced(nodes, own, **values)
    begin = rendezvous.start(nodes)
    if begin is None:
        if read is not None:  # it wrote its node alone
            read.seen = (job, attempt, nodes)
        return
    if attempt.status is AttemptStatus.OFFERED:
        await move_attempt(tx, attempt, AttemptStatus.ACKNOWLEDGED, acknowledged_at=tx.now)
        tx.audit(
            "job.gang_started",
            SYSTEM_ACTOR,
            job.id,
            attempt_id=attempt.id,
            master=f"{begin.master_addr}:{begin.master_port}",
        )
        starting = nodes
    elif own.state is not NodeState.OFFERED:
        starting = [own]  # a repeat: send its start again
    else:
        starting = []
    # Handed over to the nodes' streams on commit, on any replica; a stream that missed it
    # (a new one, a notification without it) derives it again (`offers.pending_start`).
    for worker_id, event in offers.starts(begin, starting):
        tx.hand_over(worker_topic(worker_id), event)


async def _running(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    nodes: list[AttemptNode],
    own: AttemptNode,
    report: StatusReport,
    locked: Worker | None,
    read: Read | None = None,
) -> JobStatus:
    """The node runs. The attempt (and the job) runs once every node does; then rank 0's
    reports carry the job's progress."""
    if attempt.status is AttemptStatus.OFFERED:
        raise Conflict(
            f"attempt {attempt.id} has not started: every node acknowledges, then the "
            "orchestrator sends job_start; start the process only then"
        )
    if own.state is NodeState.ACKNOWLEDGED:
        await _write_node(tx, read, attempt.id, own.rank, {"state": NodeState.RUNNING})
        nodes = _replaced(nodes, own, state=NodeState.RUNNING)
    if attempt.status is AttemptStatus.RUNNING and own.rank == 0:
        return await reports.apply(tx, job, attempt, AttemptStatus.RUNNING, report, locked)
    if attempt.status is AttemptStatus.RUNNING or not rendezvous.all_running(nodes):
        if read is not None:  # it wrote its node alone
            read.seen = (job, attempt, nodes)
        return job.status
    quiet = report if own.rank == 0 else _with_error(report, None, progress=False)
    return await reports.apply(tx, job, attempt, AttemptStatus.RUNNING, quiet, locked)


Seen = tuple[Job, Attempt, list[AttemptNode]]


class Read:
    """What the reports of one batch's transaction read under the job's lock: the job, the
    attempt and its nodes as the last report left them, while it wrote its own node's row
    alone; None: the next report reads them again (it changed more, or was refused). And
    the nodes' rows the reports left to write together: before the nodes are read again,
    or the transaction commits."""

    __slots__ = ("__weakref__", "seen", "writes")

    def __init__(self) -> None:
        self.seen: Seen | None = None
        self.writes: list[NodeWrite] = []

    def take(self) -> Seen | None:
        seen, self.seen = self.seen, None
        return seen

    async def flush(self, tx: Tx) -> None:
        writes, self.writes = self.writes, []
        if writes:
            await tx.q.update_attempt_nodes(writes)


async def _write_node(
    tx: Tx, read: Read | None, attempt_id: str, rank: int, values: dict[str, Any]
) -> None:
    """Write the node's row: in a batch, with the batch's other nodes in one statement
    (`Read.flush`); at once alone, or inside a savepoint (undone with it)."""
    if read is None or tx.savepoints:
        await tx.q.update_attempt_node(attempt_id, rank, **values)
        return
    read.writes.append((attempt_id, rank, values))
    tx.before_commit(read.flush)


_reads: weakref.WeakKeyDictionary[Tx, Read] = weakref.WeakKeyDictionary()


def _read(tx: Tx) -> Read:
    """The transaction's `Read`, shared by the batch's reports."""
    return _reads.setdefault(tx, Read())


def _replaced(nodes: list[AttemptNode], own: AttemptNode, **values: Any) -> list[AttemptNode]:
    """The nodes as this transaction's write of `own` left them (not read again)."""
    mine = dataclasses.replace(own, **values)
    return [mine if n.rank == own.rank else n for n in nodes]


def _with_error(report: StatusReport, error: str | None, *, progress: bool = True) -> StatusReport:
    return StatusReport(
        report.status,
        report.attempt_id,
        error,
        report.exit_code,
        report.progress if progress else None,
        report.points if progress else (),
    )
