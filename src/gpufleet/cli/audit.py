"""`gpufleet audit`: the audit log, newest first."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option
from gpufleet.cli.options import SINCE


@click.command()
@click.option(
    "--type",
    "event_type",
    metavar="TYPE",
    help="An event type (job.submitted) or a prefix ending in a dot (worker.).",
)
@click.option("--actor", help="Only events by this actor (admin, api_key:…, worker:…).")
@click.option("--target", metavar="ID", help="Only events about this worker, job or config.")
@click.option("--since", type=SINCE, help="Only events after this: 30m, 2h (ago) or an ISO time.")
@click.option("--until", type=SINCE, help="Only events before this: 30m, 2h (ago) or an ISO time.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, help="At most this many.")
@json_option
@api_options
def audit(
    api: ApiClient,
    event_type: str | None,
    actor: str | None,
    target: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    as_json: bool,
) -> None:
    """Show the audit log, newest first (needs the admin.audit permission)."""
    body = api.get(
        "/api/audit",
        type=event_type,
        actor=actor,
        target=target,
        since=since.isoformat() if since else None,
        until=until.isoformat() if until else None,
        limit=limit,
    )
    if as_json:
        out.print_json(body)
        return
    console = out.console()
    if not body["events"]:
        console.print("No audit events match.")
        return
    rows = [
        (out.clock(e["ts"]), e["event_type"], e["actor"], e["target"], _brief(e["detail"]))
        for e in body["events"]
    ]
    console.print(out.table(("TIME", "TYPE", "ACTOR", "TARGET", "DETAIL"), rows))
    console.print(f"\n{len(rows)} of {body['total']} event{'s' if body['total'] != 1 else ''}")


def _brief(detail: dict[str, Any]) -> str:
    """`key=value` pairs on one line; long or multi-line values cut (--json has them whole)."""
    parts = []
    for key, value in detail.items():
        if value is None or value == {}:
            continue
        text = value.strip() if isinstance(value, str) else json.dumps(value)
        first = text.splitlines()[0] if text else ""
        if len(first) > 60 or first != text:
            first = first[:60].rstrip() + "…"
        parts.append(f"{key}={first}")
    return ", ".join(parts)
