"""`gpufleet jobs logs` and `gpufleet jobs watch`: follow one job as it runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, Client, api_options, json_option, part
from gpufleet.domain.bounds import log_search_problem
from gpufleet.domain.states import PLACED_JOB, TERMINAL_JOB, JobStatus

POLL_SECONDS = 0.5
PAGE = 1000  # lines a request; the most the CLI holds at once


@click.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option(
    "-n",
    "--tail",
    type=click.IntRange(0, 2**31),
    metavar="N",
    help="Only the last N lines (with -f: then the new ones as they come).",
)
@click.option(
    "--grep",
    metavar="TEXT",
    help="Only the lines holding TEXT, as typed (no pattern), ignoring case; searched on the "
    "orchestrator (with --tail: the last N of them).",
)
@click.option(
    "--node",
    type=click.IntRange(0, 63),
    metavar="K",
    help="Only node K's lines, of a multi-node job (its nodes are 0 to nodes - 1); without "
    "it, every node's, each line opening with [node K].",
)
@json_option
@api_options
def logs(
    api: Client,
    job_id: str,
    follow: bool,
    tail: int | None,
    grep: str | None,
    node: int | None,
    as_json: bool,
) -> None:
    """Print a job's output, read and printed a page at a time (--json: one JSON object a
    line).

    With -f, follows the job live and exits 0 when it completed, 1 when it failed or was
    cancelled.
    """
    if grep is not None and follow:
        raise click.UsageError("--grep searches the lines stored so far, not new ones: drop -f")
    if grep is not None and (problem := log_search_problem(grep, "--grep")):
        raise click.UsageError(problem)
    if node is not None:
        _check_node(api, job_id, node)
    view = LogView(as_json, node)
    after = _print_pages(api, job_id, tail, grep, view)
    if follow:
        _follow_logs(api, job_id, view, after)


@dataclass(slots=True)
class LogView:
    """How lines print: as JSON, or their text (a multi-node job's lines of every node
    opening with their node, once a page says the job has several)."""

    as_json: bool = False
    node: int | None = None  # only this node's lines are read
    labelled: bool = False

    def scope(self) -> dict[str, int]:
        return {} if self.node is None else {"node": self.node}


def _check_node(api: ApiClient, job_id: str, node: int) -> None:
    nodes = int(api.get(f"/api/queue/{part(job_id)}").get("nodes", 1))
    if node >= nodes:
        ranks = "0" if nodes == 1 else f"0 to {nodes - 1}"
        raise click.BadParameter(
            f"job {job_id} runs on {nodes} node{'s' if nodes > 1 else ''}: give {ranks}, or "
            "leave --node out for every node's lines",
            param_hint="--node",
        )


def _print_pages(
    api: ApiClient, job_id: str, tail: int | None, grep: str | None, view: LogView
) -> int:
    """Every line there is now (the last `tail` only, if given; those holding `grep` only,
    if given), one page in memory at a time; returns the cursor to follow on from."""
    cursor: dict[str, int] = {"after": 0} if tail is None else {"tail": tail}
    search = {} if grep is None else {"q": grep}
    while True:
        body = api.get(
            f"/api/queue/{part(job_id)}/logs", limit=PAGE, **search, **view.scope(), **cursor
        )
        view.labelled = view.node is None and int(body.get("nodes", 1)) > 1
        for line in body["lines"]:
            _print_line(line, view)
        sys.stdout.flush()
        if not body.get("more", len(body["lines"]) == PAGE):  # may stop short at 4 MiB
            return int(body["next_after"])
        cursor = {"after": body["next_after"]}


def _follow_logs(api: Client, job_id: str, view: LogView, after: int) -> None:
    status = follow_to_end(api, job_id, view=view, after=after)
    sys.exit(0 if status == JobStatus.COMPLETED else 1)


def follow_to_end(api: Client, job_id: str, *, view: LogView | None = None, after: int = 0) -> str:
    """Print the job's log lines live from `after` until it ends; its status then."""
    view = view or LogView()
    logs = api.logs(job_id, follow=True, after=after, node=view.node)
    for line in logs:
        _print_line(line.raw, view)
    status = str(logs.status)
    out.echo(f"Job {job_id} {status}.", err=True)
    return status


def _print_line(line: Mapping[str, Any], view: LogView) -> None:
    if view.as_json:
        out.print_json(line, indent=None)
    elif view.labelled:
        out.echo(f"[node {line.get('node', 0)}] {line['text']}")
    else:
        out.echo(line["text"])


@click.command()
@click.argument("job_id")
@api_options
def watch(api: ApiClient, job_id: str) -> None:
    """Show a job's progress live until it ends, then its result.

    Exits 0 when the job completed, 1 when it failed or was cancelled; Ctrl-C stops
    watching (the job goes on).
    """
    job = api.get(f"/api/queue/{part(job_id)}")
    try:
        job = _watch(api, job)
    except KeyboardInterrupt:
        out.echo(f"Stopped watching; job {job_id} goes on.", err=True)
        sys.exit(130)
    _print_result(job)
    sys.exit(0 if job["status"] == "completed" else 1)


def _watch(api: ApiClient, job: dict[str, Any]) -> dict[str, Any]:
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[metrics]}", markup=False),
        TimeElapsedColumn(),
        console=out.console(),
    )
    seen: tuple[str, str | None, str | None, str | None] | None = None
    with bar:
        task = bar.add_task(job["id"], total=None, metrics="")
        while True:
            unheard = (job.get("worker_unheard") or {}).get("presence")
            now = (job["status"], job["current_attempt_id"], _waiting(job), unheard)
            if now != seen:
                bar.console.print(out.text(_moment(job)))
                seen = now
            _update(bar, task, job)
            if job["status"] in TERMINAL_JOB:
                return job
            time.sleep(POLL_SECONDS)
            job = api.get(f"/api/queue/{job['id']}")


def _update(bar: Progress, task: TaskID, job: dict[str, Any]) -> None:
    progress = job["progress"] or {}
    total = progress.get("total")
    step = progress.get("step") or 0
    if job["status"] == "completed" and total:
        step = total
    bar.update(
        task,
        description=out.safe(f"{job['id']} {job['status']}"),
        total=total,
        completed=step,
        metrics=out.metrics_text(progress.get("metrics") or {}),
    )


def _waiting(job: dict[str, Any]) -> str | None:
    return out.waiting(job["waiting"]) if job.get("waiting") else None


def _moment(job: dict[str, Any]) -> str:
    """One line each time the job moves: queued (and why), offered, running, ended; stamped
    with the time it ended, or else the time the move was seen."""
    stamp = (
        _clock(job["ended_at"]) if job["status"] in TERMINAL_JOB and job.get("ended_at") else None
    )
    stamp = stamp or time.strftime("%H:%M:%S")
    status = job["status"]
    if status == "queued" and _waiting(job):
        return f"{stamp} queued: {_waiting(job)}"
    if status in PLACED_JOB:
        line = f"{stamp} {status} on {_worker(job)} (attempt {job['attempts']})"
        return line + _unheard(job.get("worker_unheard"))
    return f"{stamp} {status}"


def _worker(job: dict[str, Any]) -> str:
    """The job's worker by the name a person gave it (its id once it is deleted)."""
    return str(job.get("worker_name") or job["worker_id"])


def _unheard(unheard: dict[str, Any] | None) -> str:
    """Its worker's stream is gone: said at once, with when the job is requeued."""
    if not unheard:
        return ""
    due = _clock(unheard["requeue_due"]) if unheard.get("requeue_due") else None
    then = f"; requeued at {due} unless it reconnects" if due else ""
    return f": its worker is {unheard['text']}{then}"


def _clock(iso: str) -> str | None:
    """An instant from the API as the local wall clock reads it (HH:MM:SS)."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return None


def _print_result(job: dict[str, Any]) -> None:
    took = out.duration(job["started_at"], job["ended_at"])
    exit_code = "-" if job["exit_code"] is None else job["exit_code"]
    line = f"Job {job['id']} {job['status']}: exit code {exit_code}, ran {took}"
    if job["worker_id"]:
        line += f" on {_worker(job)}"
    out.echo(line + ".")
    if job["error"]:
        out.echo(f"Error: {job['error'].rstrip()}")
