"""`gpufleet audit`: the audit log, newest first; `--verify` checks its HMAC chain."""

from __future__ import annotations

import json
import sys
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
@click.option(
    "--actor", help="Only events by this actor: a key's name or id, a worker's name, a user's name."
)
@click.option("--user", metavar="USER", help="Only events by this user's keys (a name or id).")
@click.option("--target", metavar="ID", help="Only events about this worker, job or config.")
@click.option("--since", type=SINCE, help="Only events after this: 30m, 2h (ago) or an ISO time.")
@click.option("--until", type=SINCE, help="Only events before this: 30m, 2h (ago) or an ISO time.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, help="At most this many.")
@click.option(
    "--verify",
    is_flag=True,
    help="Check the audit log's HMAC chain instead, naming each finding; exit 1 if any.",
)
@json_option
@api_options
def audit(
    api: ApiClient,
    event_type: str | None,
    actor: str | None,
    user: str | None,
    target: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    verify: bool,
    as_json: bool,
) -> None:
    """Show the audit log, newest first (needs the admin.audit permission)."""
    if verify:
        _verify(api, as_json)
        return
    body = api.get(
        "/api/audit",
        type=event_type,
        actor=actor,
        user=user,
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
        hint = body.get("hint")
        console.print(
            out.text("No audit events match." + (f" {hint[0].upper()}{hint[1:]}." if hint else ""))
        )
        return
    names = body.get("actor_names", {})  # an actor by its key's or worker's name
    users = body.get("actor_users", {})  # the user whose key it is
    rows = [
        (
            out.clock(e["ts"]),
            e["event_type"],
            names.get(e["actor"], e["actor"]),
            users.get(e["actor"], "-"),
            e["target"],
            _brief(e["detail"]),
        )
        for e in body["events"]
    ]
    console.print(out.table(("TIME", "TYPE", "ACTOR", "USER", "TARGET", "DETAIL"), rows))
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


def _verify(api: ApiClient, as_json: bool) -> None:
    body = api.get("/api/audit/verify")
    if as_json:
        out.print_json(body)
    else:
        for line in findings(body):
            out.console().print(line)
    if not body["ok"]:
        sys.exit(1)


def findings(v: dict[str, Any]) -> list[str]:
    """`GET /api/audit/verify`'s answer in words, one line a finding."""
    lines = []
    if v["unsealed"]:
        ids = ", ".join(str(i) for i in v["unsealed_ids"])
        lines.append(
            f"{v['unsealed']} entr{'y was' if v['unsealed'] == 1 else 'ies were'} written "
            f"around the server (never sealed): ids {ids}{'…' if v['unsealed'] > 20 else ''}"
        )
    if v["gaps"]:
        runs = ", ".join(
            str(g["first"]) if g["first"] == g["last"] else f"{g['first']}-{g['last']}"
            for g in v["gaps"]
        )
        many = v["missing"] != 1
        lines.append(
            f"{v['missing']} entr{'ies are' if many else 'y is'} missing from the chain: at {runs}"
        )
    broken = v["first_broken"]
    if broken is not None:
        lines.append(f"the chain first breaks at entry {broken['seq']}: {broken['reason']}")
    if v["head_behind"]:
        recorded, head = v["recorded_head"], v["chain_head"]
        if head < recorded:
            lines.append(
                f"the chain ends at entry {head} but this server recorded entry {recorded}: "
                "entries were cut from its end"
            )
        else:
            lines.append(
                f"entry {recorded} is no longer the one this server recorded: the chain was "
                "cut back and written again from there"
            )
    if not lines:
        upto = f"; the server recorded entry {v['recorded_head']}" if v["recorded_head"] else ""
        lines.append(f"ok: {v['checked']} entries verified, none missing or unsealed{upto}")
    return lines
