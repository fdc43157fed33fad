"""`gpufleet jobs`: submit, list, show and cancel jobs (logs and watch: cli/follow.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, Client, api_options, json_option, part
from gpufleet.cli.artifacts import artifacts, download
from gpufleet.cli.configs import read_config_file
from gpufleet.cli.follow import logs, watch
from gpufleet.cli.submitting import say_submitted, submit_options, with_shape
from gpufleet.domain.jobspec import could_be_config_name
from gpufleet.domain.states import JobStatus
from gpufleet.errors import InvalidInput, NotFound

STATUSES = tuple(s.value for s in JobStatus)
LIST_COLUMNS = [
    "ID",
    "STATUS",
    "CONFIG",
    "TARGET",
    "WORKER",
    "GPUS",
    "PRI",
    "PROGRESS",
    "SUBMITTED",
    "RAN",
]


@click.group()
def jobs() -> None:
    """Submit jobs and follow them through the queue."""


for _command in (logs, watch, artifacts, download):
    jobs.add_command(_command)


@jobs.command("submit")
@click.argument("config")
@submit_options
@json_option
@api_options
def submit(
    api: Client, config: str, submit: dict[str, Any], shape: dict[str, Any], as_json: bool
) -> None:
    """Submit CONFIG: a stored config's name, or a JSON file submitted inline."""
    body = dict(submit)
    path = Path(config)
    if path.is_file():
        body["config"] = with_shape(read_config_file(path), shape)
    elif not could_be_config_name(config):
        raise NotFound(
            f"there is no file {config} (CONFIG is a JSON file, or a stored config's name: "
            "see `gpufleet configs list`)"
        )
    elif shape:
        flags = " and ".join("--" + field.replace("_", "-") for field in shape)
        raise InvalidInput(
            f"{flags} set fields of the config, and a stored config runs as it was stored: "
            f"set them in it (`gpufleet configs put`), or submit a config file"
        )
    else:
        body["config_name"] = config
    try:
        job = api.submit_body(body)
    except NotFound:
        if "config_name" not in body:
            raise
        raise NotFound(
            f"there is no file {config}, and no stored config named {config!r}: give the path "
            "of a JSON file, or see `gpufleet configs list` (store one with "
            "`gpufleet configs put FILE`)"
        ) from None
    if as_json:
        out.print_json(job)
        return
    say_submitted(api, job)


@jobs.command("list")
@click.option(
    "--status", "statuses", multiple=True, type=click.Choice(STATUSES), help="Only these."
)
@click.option("--worker", metavar="NAME|ID", help="Only jobs of this worker (its name or id).")
@click.option("--target", type=click.Choice(["worker", "local", "auto"]), help="Only this target.")
@click.option("--config", "config_name", metavar="NAME", help="Only jobs of this stored config.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only jobs that ask for this label, exactly (repeatable).",
)
@click.option("--id", "id_prefix", metavar="PREFIX", help="Only jobs whose id starts so.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, help="At most this many.")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many (newest first).")
@json_option
@api_options
def list_jobs(
    api: ApiClient,
    statuses: tuple[str, ...],
    worker: str | None,
    target: str | None,
    config_name: str | None,
    labels: tuple[str, ...],
    id_prefix: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    body = api.get(
        "/api/queue",
        status=list(statuses),
        worker=worker,
        target=target,
        config_name=config_name,
        label=list(labels),
        id_prefix=id_prefix,
        limit=limit,
        offset=offset,
    )
    if as_json:
        out.print_json(body)
        return
    console = out.console()
    if not body["jobs"]:
        console.print("No jobs. Submit one: gpufleet jobs submit CONFIG")
        return
    rows = [
        (
            j["id"],
            out.status(j["status"]),
            j["config_name"] or "(inline)",
            j["target"],
            j.get("worker_name") or j["worker_id"],
            j["gpu_count"],
            j["priority"],
            out.progress_text(j["progress"], metrics=False),
            out.ago(j["created_at"]),
            out.duration(j["started_at"], j["ended_at"]),
        )
        for j in body["jobs"]
    ]
    console.print(out.table(LIST_COLUMNS, rows))
    shown = f"{offset + 1}-{offset + len(rows)}" if offset else str(len(rows))
    console.print(f"\n{shown} of {body['total']} job{'s' if body['total'] != 1 else ''}")


@jobs.command("show")
@click.argument("job_id")
@json_option
@api_options
def show(api: ApiClient, job_id: str, as_json: bool) -> None:
    """Show one job: status, progress, attempts, and why it waits."""
    job = api.get(f"/api/queue/{part(job_id)}")
    if as_json:
        out.print_json(job)
        return
    console = out.console()
    console.print(out.fields(_job_fields(job)))
    if job["error"]:
        console.print(Text("\nerror", style="bold"))
        console.print(out.text(job["error"]))
    if job["attempt_history"]:
        console.print(Text("\nattempts", style="bold"))
        console.print(_attempts(job["attempt_history"]))
    if job["waiting"]:
        console.print(
            Text.assemble(("\nwaiting", "bold"), out.text(f": {out.waiting(job['waiting'])}"))
        )
        for w in job["waiting"]["workers"]:
            console.print(out.text(f"  {w['name']} ({w['status']}): {'; '.join(w['reasons'])}"))


def _named(name: str | None, ident: str | None) -> str | None:
    """`name (id)`, or the id alone once the worker or key is gone."""
    return f"{name} ({ident})" if name and ident else ident


def _config_ran(job: dict[str, Any]) -> str:
    """`prod-train v3 (sha256 abcd1234…) written by vera`: the stored config's version it ran."""
    if not job["config_name"]:
        return "(inline)"
    if job.get("config_version") is None:
        return str(job["config_name"])
    said = f"{job['config_name']} v{job['config_version']} (sha256 {job['config_digest'][:8]}…)"
    writer = job.get("config_written_by")
    return f"{said} written by {writer}" if writer else said


def _job_fields(job: dict[str, Any]) -> list[tuple[str, Any]]:
    by = _named(job.get("submitted_by_name"), job["submitted_by"]) or "-"
    reruns = [("re-run of", job.get("rerun_of")), ("re-run as", ", ".join(job.get("rerun_as", [])))]
    return [
        ("id", job["id"]),
        ("status", out.status(job["status"])),
        ("config", _config_ran(job)),
        ("target", job["target"]),
        ("labels", job["worker_labels"]),
        ("gpus", job["gpu_count"]),
        ("priority", job["priority"]),
        ("worker", _named(job.get("worker_name"), job["worker_id"])),
        (
            "attempts",
            f"{job['attempts']} (retries allowed: {job['max_retries']}, "
            f"after: {', '.join(job['retry_on']) or 'never'})",
        ),
        ("progress", out.progress_text(job["progress"])),
        ("exit code", job["exit_code"]),
        ("submitted", f"{out.when(job['created_at'])} by {by}"),
        ("user", job.get("user") or "-"),
        ("team", job.get("team") or "-"),
        *[
            (f"{verb} by", _named(job.get(f"{verb}_by_name"), job[f"{verb}_by"]))
            for verb in ("approved", "rejected")
            if job.get(f"{verb}_by")
        ],
        ("started", out.when(job["started_at"])),
        ("ended", out.when(job["ended_at"])),
        *[(k, v) for k, v in reruns if v],
        *([("cost", out.money(job["cost"]))] if job.get("cost") is not None else []),
        *_links(job),
    ]


def _links(job: dict[str, Any]) -> list[tuple[str, str]]:
    """What it runs after and what runs after it (docs/jobs.md, Dependencies)."""
    ups = [f"{d['job']} ({d['status']}, on {d['on']})" for d in job.get("depends_on", [])]
    downs = [f"{d['job']} ({d['status']})" for d in job.get("dependents", [])]
    inputs = [f"{j}: {', '.join(p)}" for j, p in (job.get("inputs") or {}).items()]
    shown = [("runs after", ups), ("inputs", inputs), ("run after it", downs)]
    return [(name, "; ".join(items)) for name, items in shown if items]


def _attempts(attempts: list[dict[str, Any]]) -> Table:
    return out.table(
        ("#", "ATTEMPT", "WORKER", "STATUS", "OFFERED", "RAN", "EXIT", "RESUMED FROM"),
        [
            (
                a["number"],
                a["id"],
                a.get("worker_name") or a["worker_id"],
                out.status(a["status"]),
                out.ago(a["offered_at"]),
                out.duration(a["started_at"], a["ended_at"]),
                a["exit_code"],
                _resumed(a.get("resumed_from")),
            )
            for a in attempts
        ],
    )


def _resumed(resumed: dict[str, Any] | None) -> str | None:
    """`checkpoint-1200 (attempt 2)`: where an attempt started from, if not from scratch."""
    return f"{resumed['checkpoint']} (attempt {resumed['attempt_number']})" if resumed else None


@jobs.command("cancel")
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@json_option
@api_options
def cancel(api: Client, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel jobs; a running one is stopped on its worker."""
    if len(job_ids) == 1:
        job = api.cancel(job_ids[0])
        if as_json:
            out.print_json(job.raw)
        else:
            out.echo(f"Job {job.id} is {job.status}.")
        return
    _bulk(api, "cancel", job_ids, as_json, lambda j: f"Job {j['id']} is {j['status']}.")


@jobs.command("rerun")
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@json_option
@api_options
def rerun(api: ApiClient, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Submit ended jobs again: same config and requirements, each linked to the old job."""

    def said(j: dict[str, Any]) -> str:
        return f"Job {j['rerun_of']} re-runs as {j['id']} ({j['status']}).\n" + (
            f"Follow it: gpufleet jobs watch {j['id']}" if len(job_ids) == 1 else ""
        )

    if len(job_ids) == 1:
        job = api.post(f"/api/queue/{part(job_ids[0])}/rerun")
        if as_json:
            out.print_json(job)
        else:
            out.echo(said(job).rstrip())
        return
    _bulk(api, "rerun", job_ids, as_json, lambda j: said(j).rstrip())


def _bulk(
    api: ApiClient,
    action: str,
    job_ids: tuple[str, ...],
    as_json: bool,
    done: Callable[[dict[str, Any]], str],
) -> None:
    """One call for every job; a line each; exit code 1 if any was not done."""
    body = api.post(f"/api/queue/{action}", {"job_ids": list(job_ids)})
    if as_json:
        out.print_json(body)
    else:
        for r in body["results"]:
            out.echo(done(r["job"]) if r["ok"] else f"Job {r['job_id']}: {r['error']}")
        if len(body["results"]) > 1:
            out.echo(f"{body['done']} done, {body['failed']} not.")
    if body["failed"]:
        sys.exit(1)
