"""`gpufleet queue`: the queue's state and policy: stats, your jobs, a job's position,
approvals, limits and the cleanup (docs/scheduling.md)."""

from __future__ import annotations

from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.policy import COUNT_FIELDS, POLICY_FIELDS, SECONDS_FIELDS, SWITCH_FIELDS
from gpufleet.errors import InvalidInput

_NONE = ("none", "null", "off", "")


def parse_setting(pair: str) -> tuple[str, Any]:
    """`FIELD=VALUE` as the policy body takes it: a count (or none), on/off, seconds, or
    levels separated by commas."""
    name, eq, raw = pair.partition("=")
    name, raw = name.strip().replace("-", "_"), raw.strip()
    if not eq or name not in POLICY_FIELDS:
        raise InvalidInput(
            f"{pair!r} is not FIELD=VALUE with FIELD one of: {', '.join(POLICY_FIELDS)}"
        )
    try:
        if name in COUNT_FIELDS:
            return name, None if raw.lower() in _NONE else int(raw)
        if name in SECONDS_FIELDS:
            return name, float(raw)
    except ValueError:
        raise InvalidInput(f"{name} takes a number (or none for no limit), not {raw!r}") from None
    if name in SWITCH_FIELDS:
        if raw.lower() not in ("on", "off", "true", "false", "yes", "no"):
            raise InvalidInput(f"{name} is on or off, not {raw!r}")
        return name, raw.lower() in ("on", "true", "yes")
    return name, [v.strip() for v in raw.split(",") if v.strip()]


@click.group()
def queue() -> None:
    """The queue's state, your place in it, approvals and the sharing policy."""


@queue.command("stats")
@json_option
@api_options
def stats(api: ApiClient, as_json: bool) -> None:
    """Queue depth, what runs, the limits, the average wait, jobs by status and by user."""
    body = api.get("/api/queue/stats")
    if as_json:
        out.print_json(body)
        return
    wait = body["avg_wait_seconds"]
    console = out.console()
    console.print(
        out.fields(
            [
                ("queued", body["queue_depth"]),
                ("running", body["running"]),
                ("running jobs, fleet", _limit(body["max_concurrent"])),
                ("running jobs, a team", _limit(body["team_max_concurrent"])),
                ("running jobs, a user", _limit(body["user_max_concurrent"])),
                ("GPUs, fleet", _limit(body["max_gpus"])),
                ("GPUs, a team", _limit(body["team_max_gpus"])),
                ("GPUs, a user", _limit(body["user_max_gpus"])),
                ("queued jobs, a user", _limit(body["user_max_queued"])),
                ("fair share", "on" if body["fair_share"] else "off"),
                ("average wait", f"{wait:.0f} s" if wait is not None else "-"),
            ]
        )
    )
    if body["by_user"]:
        rows = sorted(body["by_user"].items(), key=lambda kv: (-kv[1], kv[0]))
        console.print()
        console.print(out.table(["USER", "JOBS"], rows))
    if body["cost"]["by_pool"]:
        _costs(body["cost"])


def _costs(cost: dict[str, Any]) -> None:
    """What the pools cost, an hour now and to date, and who ran on them (docs/capacity.md)."""
    console = out.console()
    console.print()
    console.print(
        out.fields(
            [
                ("pools cost now", f"{out.money(cost['per_hour'])}/h"),
                ("pools cost to date", out.money(cost["to_date"])),
            ]
        )
    )
    pools = [
        (
            name,
            f"{out.money(c['per_hour'])}/h",
            out.money(c["to_date"]),
            f"{c['worker_hours']:.1f}",
            out.money(c["idle"]),
        )
        for name, c in sorted(cost["by_pool"].items())
    ]
    console.print(out.table(["POOL", "NOW", "TO DATE", "WORKER-HOURS", "IDLE"], pools))
    for who, spent in (("TEAM", cost["by_team"]), ("USER", cost["by_user"])):
        if spent:
            rows = [(k, out.money(v)) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])]
            console.print(out.table([who, "COST"], rows))


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


@queue.command("me")
@json_option
@api_options
def me(api: ApiClient, as_json: bool) -> None:
    """Your jobs waiting, running and waiting for approval, and your best position."""
    body = api.get("/api/queue/me")
    if as_json:
        out.print_json(body)
        return
    best = body["best_position"]
    out.echo(
        f"{body['pending_count']} queued, {body['running_count']} running, "
        f"{body['blocked_count']} waiting for approval; best position: "
        f"{best if best is not None else '-'}"
    )
    jobs = [*body["running_jobs"], *body["pending_jobs"], *body["blocked_jobs"]]
    if jobs:
        rows = [(j["id"], out.status(j["status"]), j["team"], j["gpu_count"]) for j in jobs]
        out.console().print(out.table(["ID", "STATUS", "TEAM", "GPUS"], rows))


@queue.command("position")
@click.argument("job_id")
@json_option
@api_options
def position(api: ApiClient, job_id: str, as_json: bool) -> None:
    """JOB_ID's place in the queue (1: offered next)."""
    body = api.get(f"/api/queue/position/{part(job_id)}")
    if as_json:
        out.print_json(body)
        return
    if body["position"] is None:
        out.echo(f"Job {body['job_id']} is {body['status']}, not queued.")
        return
    line = f"Job {body['job_id']}: position {body['position']}"
    if body["ahead_by_share"]:
        line += f"; {body['ahead_by_share']} of the jobs ahead are of teams further below share"
    out.echo(line + ".")


@queue.command("approve")
@click.argument("job_id")
@json_option
@api_options
def approve(api: ApiClient, job_id: str, as_json: bool) -> None:
    """Let JOB_ID, held by an approval rule, into the queue (leads and admins)."""
    job = api.post(f"/api/queue/{part(job_id)}/approve")
    if as_json:
        out.print_json(job)
        return
    out.echo(f"Approved job {job['id']}: {job['status']}.")


@queue.command("reject")
@click.argument("job_id")
@click.option("--reason", required=True, help="Why, for the job's submitter to read.")
@json_option
@api_options
def reject(api: ApiClient, job_id: str, reason: str, as_json: bool) -> None:
    """Cancel JOB_ID, held by an approval rule, saying why (leads and admins)."""
    job = api.post_query(f"/api/queue/{part(job_id)}/reject", reason=reason)
    if as_json:
        out.print_json(job)
        return
    out.echo(f"Rejected job {job['id']}: {job['error']}.")


@queue.command("limits")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="FIELD=VALUE",
    help=f"Change a field (repeatable; admins): {', '.join(POLICY_FIELDS)}. A count of none lifts "
    "the limit; fair_share and preemption are on or off; approve_levels lists levels.",
)
@json_option
@api_options
def limits(api: ApiClient, settings: tuple[str, ...], as_json: bool) -> None:
    """The sharing policy: limits, fair share, preemption and approval rules."""
    if settings:
        body = api.patch("/api/queue/policy", dict(parse_setting(s) for s in settings))
    else:
        body = api.get("/api/queue/policy")
    if as_json:
        out.print_json(body)
        return
    shown = [(name, body[name]) for name in POLICY_FIELDS]
    out.console().print(out.fields((n, _shown(v)) for n, v in shown))


def _shown(value: Any) -> str:
    if value is None:
        return "no limit"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(value) or "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


@queue.command("cleanup")
@click.option("--days", type=click.IntRange(1, 365), default=30, help="Ended this long ago.")
@json_option
@api_options
def cleanup(api: ApiClient, days: int, as_json: bool) -> None:
    """Delete jobs that ended more than DAYS days ago (admins); never one still active."""
    body = api.post_query("/api/queue/cleanup", days=days)
    if as_json:
        out.print_json(body)
        return
    n = body["deleted"]
    out.echo(f"Deleted {n} job{'s' if n != 1 else ''} ended more than {days} days ago.")
