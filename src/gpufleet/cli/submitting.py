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
from gpufleet.domain.jobspec import MAX_NODES
from gpufleet.domain.naming import LABEL_KEY, LABEL_KEY_RULE
from gpufleet.errors import InvalidInput


def _label_key(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not LABEL_KEY.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a label name: {LABEL_KEY_RULE}")
    return value


def _after(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[Any]:
    after: list[Any] = []
    for value in values:
        job, sep, on = value.partition(":")
        if sep and on != "ended":
            raise click.BadParameter(f"{value!r}: give JOB, or JOB:ended", ctx=ctx, param=param)
        after.append({"job": job, "on": "ended"} if sep else job)
    return after


def _inputs(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, list[str]]:
    inputs: dict[str, list[str]] = {}
    for value in values:
        job, sep, glob = value.partition("=")
        if not sep or not job or not glob:
            raise click.BadParameter(f"{value!r} is not JOB=GLOB", ctx=ctx, param=param)
        inputs.setdefault(job, []).append(glob)
    return inputs


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
        "--nodes",
        type=click.IntRange(1, MAX_NODES),
        help="Machines the job runs on, each with --gpus GPUs: more than 1 is a multi-node "
        "job, offered to that many workers at once (docs/jobs.md).",
        show_default="the config's nodes, else 1",
    ),
    click.option(
        "--same-label",
        metavar="LABEL",
        callback=_label_key,
        help="With --nodes: every node has the same value of this worker label (one rack, "
        "one zone).",
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
    click.option(
        "--after",
        multiple=True,
        metavar="JOB[:ended]",
        callback=_after,
        help="Run once job JOB completed (its failure or cancel cancels this one); JOB:ended: "
        "once it ended, however (repeatable).",
    ),
    click.option(
        "--input",
        "inputs",
        multiple=True,
        metavar="JOB=GLOB",
        callback=_inputs,
        help="Put the artifacts of job JOB (one of --after) that GLOB selects into the job's "
        "folder, under inputs/JOB/, before it starts: --input j_1=output/** (repeatable).",
    ),
    click.option(
        "--idempotency-key",
        metavar="KEY",
        help="Submit at most once: again with this key within 24 hours, you get the job the "
        "first submit made instead of a new one (a CI build's id, a commit sha).",
    ),
)


def submit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the submit options and hands the command `submit`: the body of
    `POST /api/queue/submit` they make, without its config; and `shape`: the config fields
    they set (`nodes`, `same_label`: `with_shape` puts them in the config)."""

    @functools.wraps(command)
    def run(
        *args: Any,
        target: str,
        labels: dict[str, str],
        gpu_count: int | None,
        nodes: int | None,
        same_label: str | None,
        priority: int | None,
        team: str | None,
        preemptible: bool | None,
        max_retries: int,
        retry_failed: bool,
        after: list[Any],
        inputs: dict[str, list[str]],
        idempotency_key: str | None,
        **kwargs: Any,
    ) -> Any:
        submit: dict[str, Any] = {
            "target": target,
            "worker_labels": labels,
            "gpu_count": gpu_count,
            "priority": priority,
            "team": team,
            "preemptible": preemptible,
            "max_retries": max_retries,
            "retry_on": ["lost", "failed"] if retry_failed else ["lost"],
        }
        if after or inputs:
            submit |= {"depends_on": after, "inputs": inputs}
        if idempotency_key is not None:
            submit["idempotency_key"] = idempotency_key
        shape = {"nodes": nodes, "same_label": same_label}
        shape = {key: value for key, value in shape.items() if value is not None}
        return command(*args, submit=submit, shape=shape, **kwargs)

    for option in reversed(_SUBMIT_OPTIONS):
        run = option(run)
    return run


def with_shape(config: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """The config with the machines `--nodes` and `--same-label` ask for; refused where
    the config says otherwise (the job would run on a number of machines its trainer does
    not expect)."""
    for field, value in shape.items():
        flag = "--" + field.replace("_", "-")
        own = config.get(field)
        if own is not None and own != value:
            raise InvalidInput(
                f"{flag} {value} disagrees with the config's own {field!r} ({own}): run it "
                f"with {flag} {own}, or without {flag} to take the config's, or change "
                f"{field!r} in the config"
            )
    return {**config, **shape}


def say_submitted(api: ApiClient, job: dict[str, Any], *, follow_hint: bool = True) -> None:
    """`Submitted job …`, and what it waits for when no worker took it at once."""
    if job.get("idempotent_hit"):
        out.echo(
            f"Job {job['id']} was submitted already with this idempotency key "
            f"({job['status']}, target {job['target']}); no new job was made."
        )
    else:
        out.echo(f"Submitted job {job['id']} ({job['status']}, target {job['target']}).")
    if job["status"] in ("queued", "pending_approval"):
        waiting = api.get(f"/api/queue/{part(job['id'])}")["waiting"]
        if waiting:
            out.echo(f"Waiting: {out.waiting(waiting)}.")
    if follow_hint:
        out.echo(f"Follow it: gpufleet jobs watch {job['id']}")
