"""`gpufleet workers`: list, create, drain, rotate tokens and delete workers."""

from __future__ import annotations

import shlex
from typing import Any

import click
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.cli.options import parse_labels
from gpufleet.cli.resolve import worker_id as resolve_worker
from gpufleet.domain.states import WorkerStatus

STATUSES = tuple(s.value for s in WorkerStatus)


@click.group()
def workers() -> None:
    """Manage the fleet's workers (needs the admin.workers permission).

    A WORKER argument is a worker's id, or its name when no other worker has it."""


@workers.command("list")
@click.option(
    "--status", "statuses", multiple=True, type=click.Choice(STATUSES), help="Only these."
)
@json_option
@api_options
def list_workers(api: ApiClient, statuses: tuple[str, ...], as_json: bool) -> None:
    """List workers with their status, GPUs, labels and current job."""
    body = api.get("/api/admin/workers", status=list(statuses))
    if as_json:
        out.print_json(body)
        return
    rows = [
        (
            w["id"],
            w["name"],
            _status(w),
            w["worker_type"] + (" (local)" if w["is_local"] else ""),
            _gpus(w),
            {**w["labels"], **w["admin_labels"]},
            # idle and held for a gang, or kept from jobs by its health: why
            w["current_job_id"] or w.get("held_note") or _health_note(w),
            out.ago(w["last_heartbeat"]),
        )
        for w in body["workers"]
    ]
    console = out.console()
    if not rows:
        console.print("No workers. Create one: gpufleet workers create NAME")
    else:
        console.print(
            out.table(
                ("ID", "NAME", "STATUS", "TYPE", "GPUS", "LABELS", "JOB", "SEEN"),
                rows,
                wrap="LABELS",
            )
        )
        # Per presence, in the words the rows use ("never connected").
        counts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in body["counts"].items() if n)
        console.print(out.text(f"\n{len(rows)} worker{'s' if len(rows) != 1 else ''}: {counts}"))
    for job in body["unmatched_jobs"]:  # what the fleet lacks, as each job says
        console.print(out.text(f"Job {job['job_id']} waits: {out.waiting(job)}"))


@workers.command("show")
@click.argument("worker")
@json_option
@api_options
def show_worker(api: ApiClient, worker: str, as_json: bool) -> None:
    """Show one WORKER (its id, or its name): status, hardware, labels, job and times."""
    w = api.get(f"/api/admin/workers/{part(resolve_worker(api, worker))}")
    if as_json:
        out.print_json(w)
        return
    caps = w.get("capabilities") or {}
    out.console().print(
        out.fields(
            [
                ("id", w["id"]),
                ("name", w["name"]),
                ("status", _status(w)),
                ("type", w["worker_type"] + (" (local)" if w["is_local"] else "")),
                ("gpus", _gpus(w)),
                ("driver", caps.get("driver_version")),
                ("cuda", caps.get("cuda_version")),
                ("labels", w["labels"]),
                ("admin labels", w["admin_labels"]),
                ("current job", w["current_job_id"]),
                ("held", _held(w)),
                *_health(w),
                ("jobs run", w["jobs_run"]),
                ("last heartbeat", out.when(w["last_heartbeat"])),
                ("connected", out.when(w["up_since"])),
                ("offline since", out.when(w["offline_since"])),
                ("created", out.when(w["created_at"])),
            ]
        )
    )


@workers.command("create")
@click.argument("name")
@click.option(
    "--type",
    "worker_type",
    type=click.Choice(["persistent", "ephemeral"]),
    default="persistent",
    help="Persistent machines stay between jobs; ephemeral ones exit after one.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parse_labels,
    help="An admin label (repeatable); admin labels win over the worker's own.",
)
@click.option(
    "--orchestrator-url",
    metavar="URL",
    help="The URL the worker will call, in the printed command; default: the server's "
    "--public-url.",
)
@json_option
@api_options
def create_worker(
    api: ApiClient,
    name: str,
    worker_type: str,
    labels: dict[str, str],
    orchestrator_url: str | None,
    as_json: bool,
) -> None:
    """Create a worker and print its token (shown only this once) and how to start it."""
    where = api.get("/api/admin/orchestrator")
    body = api.post(
        "/api/admin/workers", {"name": name, "worker_type": worker_type, "labels": labels}
    )
    if as_json:
        out.print_json(body)
        return
    args = [
        "worker",
        "--orchestrator-url",
        orchestrator_url or where["public_url"],
        "--worker-token",
        body["token"],
        "--name",
        body["name"],
    ]
    if worker_type == "persistent":
        args.append("--persistent")
    out.echo(f"Created worker {body['worker_id']} ({body['name']}, {worker_type}).")
    out.echo(f"Token (shown only once): {body['token']}")
    out.echo("Start it on the GPU machine (pip install gpufleet there first if need be):")
    out.echo(f"  {shlex.join(['gpufleet', *args])}")
    if where["gpufleet"] != "gpufleet":
        out.echo("or on the orchestrator's machine, with its own copy:")
        out.echo(f"  {shlex.join([where['gpufleet'], *args])}")


@workers.command("drain")
@click.argument("worker")
@json_option
@api_options
def drain_worker(api: ApiClient, worker: str, as_json: bool) -> None:
    """Stop sending jobs to a worker; its running job finishes (undo: `workers undrain`)."""
    w = api.post(f"/api/admin/workers/{part(resolve_worker(api, worker))}/drain")
    if as_json:
        out.print_json(w)
    elif w["current_job_id"]:
        out.echo(
            f"Draining worker {w['id']} ({w['name']}): job {w['current_job_id']} finishes, "
            "then no new jobs."
        )
    else:
        out.echo(f"Drained worker {w['id']} ({w['name']}): no new jobs.")


@workers.command("undrain")
@click.argument("worker")
@json_option
@api_options
def undrain_worker(api: ApiClient, worker: str, as_json: bool) -> None:
    """Lift a drain: the worker takes jobs again."""
    w = api.post(f"/api/admin/workers/{part(resolve_worker(api, worker))}/undrain")
    if as_json:
        out.print_json(w)
    else:
        out.echo(f"Worker {w['id']} ({w['name']}) takes jobs again: {w['status']}.")


@workers.command("rotate-token")
@click.argument("worker")
@json_option
@api_options
def rotate_token(api: ApiClient, worker: str, as_json: bool) -> None:
    """Give a worker a new token; the old one and its connection stop working at once."""
    body = api.post(f"/api/admin/workers/{part(resolve_worker(api, worker))}/token")
    if as_json:
        out.print_json(body)
        return
    out.echo(f"New token for {body['worker_id']} (shown only once): {body['token']}")
    out.echo("The old token no longer works: restart the worker with --worker-token NEW.")


@workers.command("label")
@click.argument("worker")
@click.argument("labels", nargs=-1, metavar="[KEY=VALUE]...", callback=parse_labels)
@json_option
@api_options
def label_worker(api: ApiClient, worker: str, labels: dict[str, str], as_json: bool) -> None:
    """Set a worker's admin labels (the whole set; none given removes them).

    Admin labels are merged over the labels the worker reports; on a clash the admin's win."""
    worker_id = resolve_worker(api, worker)
    w = api.put(f"/api/admin/workers/{part(worker_id)}/labels", {"labels": labels})
    if as_json:
        out.print_json(w)
        return
    given = ", ".join(f"{k}={v}" for k, v in sorted(w["admin_labels"].items())) or "none"
    matched = ", ".join(f"{k}={v}" for k, v in sorted(w["labels"].items())) or "none"
    out.echo(f"Worker {w['id']} ({w['name']}): admin labels {given}; matched on {matched}.")


@workers.command("delete")
@click.argument("worker")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def delete_worker(api: ApiClient, worker: str, yes: bool) -> None:
    """Delete a worker that is offline or has never connected, and its token."""
    worker_id = resolve_worker(api, worker)
    shown = worker_id if worker == worker_id else f"{worker_id} ({worker})"
    if not yes:
        click.confirm(f"Delete worker {shown} and its token?", abort=True, err=True)
    api.delete(f"/api/admin/workers/{part(worker_id)}")
    out.echo(f"Deleted worker {shown}.")


def _held(w: dict[str, Any]) -> str | None:
    """Why an idle worker is kept from other jobs: the gang it is held for, since when."""
    note = w.get("held_note")
    return None if note is None else f"{note}, since {out.when(w.get('held_since'))}"


def _health(w: dict[str, Any]) -> list[tuple[str, Any]]:
    """Its health's rows, only those that say something (docs/workers.md, Health)."""
    rows = [
        ("gpu faults", _faults(w)),
        ("drained because", w.get("drain_reason")),
        ("infra failures", w.get("infra_failures") or None),
        ("preflight", _preflight(w)),
    ]
    return [(name, value) for name, value in rows if value is not None]


def _faults(w: dict[str, Any]) -> str | None:
    """Its faulty GPUs, taken out until it registers again."""
    faults = w.get("gpu_faults") or []
    return "; ".join(f"GPU {f['index']}: {f['reason']}" for f in faults) or None


def _preflight(w: dict[str, Any]) -> str | None:
    error = w.get("preflight_error")
    return None if error is None else f"failing (no job until it passes):\n{error}"


def _health_note(w: dict[str, Any]) -> str | None:
    """One line for the list: its failing preflight's last line, its faults, the breaker."""
    error = w.get("preflight_error")
    if error is not None:
        return "preflight fails: " + (str(error).strip().splitlines() or [""])[-1][:120]
    reason: str | None = w.get("drain_reason")
    return reason or _faults(w)


def _status(w: dict[str, Any]) -> Text:
    """The status in the server's words for it (`presence_text`: e.g. never connected)."""
    return out.status(w["status"], w.get("presence_text"))


def _gpus(w: dict[str, Any]) -> str:
    if not w["gpu_count"]:
        return (w.get("accelerator_type") or "cpu") if w["registered"] else "-"
    name = w["gpu_name"] or w.get("accelerator_type") or "GPU"
    vram = f" {w['gpu_vram_gb']:g} GB" if w.get("gpu_vram_gb") else ""
    return f"{w['gpu_count']} x {name}{vram}"
