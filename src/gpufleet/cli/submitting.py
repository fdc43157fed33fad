"""The options every submitting command takes (`jobs submit`, `run`), declared once, and what
the CLI says of a job it submitted."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, part
from gpufleet.cli.options import parse_labels

_SUBMIT_OPTIONS = (
    click.option(
        "--target",
        type=click.Choice(["worker", "local", "auto"]),
        default="worker",
        help="worker: remote workers; local: the orchestrator's own runner; auto: an idle "
        "remote worker, else local.",
    ),
    click.option(
        "--label",
        "labels",
        multiple=True,
        metavar="KEY=VALUE",
        callback=parse_labels,
        help="Run only on workers with this label; the value may be a glob like a100* "
        "(repeatable).",
    ),
    click.option(
        "--gpus",
        "gpu_count",
        type=click.IntRange(0, 1024),
        help="GPUs the job needs.",
        show_default="the config's gpu_count",
    ),
    click.option(
        "--priority",
        type=click.IntRange(-1000, 1000),
        help="Higher runs first; above your level's default only for leads and admins.",
        show_default="your level's: admin 30, lead 20, researcher 10, viewer 0",
    ),
    click.option(
        "--team",
        metavar="TEAM",
        help="The team (name or id) the job is for; one of yours.",
        show_default="your default team",
    ),
    click.option(
        "--preemptible/--not-preemptible",
        default=None,
        help="Whether the queue policy may stop it for another job (it resumes from its "
        "checkpoint).",
        show_default="as its team says",
    ),
    click.option(
        "--max-retries",
        type=click.IntRange(0, 100),
        default=3,
        help="Requeue this many times after a lost worker (see --retry-failed).",
    ),
    click.option(
        "--retry-failed",
        is_flag=True,
        help="Retry when the job's own process fails too, not only when its worker is lost.",
    ),
)


def submit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the submit options and hands the command `submit`: the body of
    `POST /api/queue/submit` they make, without its config."""

    @functools.wraps(command)
    def run(
        *args: Any,
        target: str,
        labels: dict[str, str],
        gpu_count: int | None,
        priority: int | None,
        team: str | None,
        preemptible: bool | None,
        max_retries: int,
        retry_failed: bool,
        **kwargs: Any,
    ) -> Any:
        submit = {
            "target": target,
            "worker_labels": labels,
            "gpu_count": gpu_count,
            "priority": priority,
            "team": team,
            "preemptible": preemptible,
            "max_retries": max_retries,
            "retry_on": ["lost", "failed"] if retry_failed else ["lost"],
        }
        return command(*args, submit=submit, **kwargs)

    for option in reversed(_SUBMIT_OPTIONS):
        run = option(run)
    return run


def say_submitted(api: ApiClient, job: dict[str, Any], *, follow_hint: bool = True) -> None:
    """`Submitted job …`, and what it waits for when no worker took it at once."""
    out.echo(f"Submitted job {job['id']} ({job['status']}, target {job['target']}).")
    if job["status"] in ("queued", "pending_approval"):
        waiting = api.get(f"/api/queue/{part(job['id'])}")["waiting"]
        if waiting:
            out.echo(f"Waiting: {out.waiting(waiting)}.")
    if follow_hint:
        out.echo(f"Follow it: gpufleet jobs watch {job['id']}")
