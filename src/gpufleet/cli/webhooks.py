"""`gpufleet webhooks`: notifications POSTed to a URL (needs a key with `*`; see
docs/webhooks.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.webhooks import (
    FORMAT_HELP,
    MIN_SECRET_LENGTH,
    SUBSCRIPTION_HELP,
    PayloadFormat,
    Subscription,
)
from gpufleet.errors import InvalidInput

_EVENTS = ", ".join(f"{s.value} ({text})" for s, text in SUBSCRIPTION_HELP.items())
TEST_WAIT_S = 20.0
F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def webhooks() -> None:
    """Add, change, test and delete webhooks, and read their delivery logs."""


@webhooks.command("list")
@json_option
@api_options
def list_webhooks(api: ApiClient, as_json: bool) -> None:
    """List webhooks (never their secret; URLs as scheme://host[:port]/…, since the rest
    may hold credentials)."""
    body = api.get("/api/admin/webhooks")
    if as_json:
        out.print_json(body)
        return
    if not body["webhooks"]:
        out.console().print("No webhooks. Add one: gpufleet webhooks add URL --event job.ended")
        return
    rows = [
        (
            h["id"],
            h["url"],
            ",".join(h["events"]),
            h["format"],
            "yes" if h["signed"] else "no",
            out.ago(h["created_at"]),
        )
        for h in body["webhooks"]
    ]
    heads = ("ID", "URL", "EVENTS", "FORMAT", "SIGNED", "ADDED")
    out.console().print(out.table(heads, rows, wrap="URL"))


def _event_option(*, required: bool) -> Callable[[F], F]:
    return click.option(
        "--event",
        "-e",
        "events",
        multiple=True,
        required=required,
        type=click.Choice([s.value for s in Subscription]),
        help=f"An event to send (repeat for several): {_EVENTS}."
        + ("" if required else " Given, they replace the webhook's events."),
    )


_secret_env_option = click.option(
    "--secret-env",
    metavar="VAR",
    help="Sign deliveries with the secret in this environment variable (at least 16 "
    "characters; kept off the command line and out of shell history).",
)


def _secret_from(secret_env: str) -> str:
    secret = os.environ.get(secret_env, "")
    if not secret:
        raise InvalidInput(f"${secret_env} is empty or unset; export the secret in it first")
    if len(secret) < MIN_SECRET_LENGTH:
        raise InvalidInput(
            f"${secret_env} holds {len(secret)} characters; a webhook secret needs at least "
            f"{MIN_SECRET_LENGTH}: export a longer one (such as: openssl rand -hex 32)"
        )
    return secret


def _format_option(help_: str) -> Callable[[F], F]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice([f.value for f in PayloadFormat]),
        help=help_ + " " + "; ".join(f"{f.value}: {text}" for f, text in FORMAT_HELP.items()),
    )


def _said(hook: dict[str, Any]) -> str:
    signed = "signed" if hook["signed"] else "unsigned"
    return f"webhook {hook['id']} ({signed}, {hook['format']}) for {', '.join(hook['events'])}"


@webhooks.command("add")
@click.argument("target", metavar="URL")
@_event_option(required=True)
@_secret_env_option
@_format_option("The body's shape (default gpufleet).")
@json_option
@api_options
def add_webhook(
    api: ApiClient,
    target: str,
    events: tuple[str, ...],
    secret_env: str | None,
    fmt: str | None,
    as_json: bool,
) -> None:
    """Send the chosen events to URL (http or https): a Slack or Discord incoming webhook's
    URL with --format slack or discord."""
    body: dict[str, Any] = {"url": target, "events": list(events)}
    if fmt is not None:
        body["format"] = fmt
    if secret_env is not None:
        body["secret"] = _secret_from(secret_env)
    hook = api.post("/api/admin/webhooks", body)
    if as_json:
        out.print_json(hook)
        return
    out.echo(f"Added {_said(hook)}.")
    out.echo(f"Try it: gpufleet webhooks test {hook['id']}")


@webhooks.command("update")
@click.argument("webhook_id")
@click.option("--to", "target", metavar="URL", help="Send to this URL (http or https) instead.")
@_event_option(required=False)
@_secret_env_option
@click.option("--unsigned", is_flag=True, help="Drop the secret: deliveries go unsigned.")
@_format_option("Send bodies in this shape instead.")
@json_option
@api_options
def update_webhook(
    api: ApiClient,
    webhook_id: str,
    target: str | None,
    events: tuple[str, ...],
    secret_env: str | None,
    unsigned: bool,
    fmt: str | None,
    as_json: bool,
) -> None:
    """Change a webhook's URL, events, format or secret; what is not given stays. Deliveries not
    sent yet go to it as it is then."""
    if secret_env is not None and unsigned:
        raise InvalidInput("give --secret-env VAR or --unsigned, not both")
    body: dict[str, Any] = {}
    if target is not None:
        body["url"] = target
    if events:
        body["events"] = list(events)
    if secret_env is not None:
        body["secret"] = _secret_from(secret_env)
    if unsigned:
        body["secret"] = None
    if fmt is not None:
        body["format"] = fmt
    if not body:
        raise InvalidInput(
            "nothing to change: give --to, --event, --format, --secret-env or --unsigned"
        )
    hook = api.patch(f"/api/admin/webhooks/{part(webhook_id)}", body)
    if as_json:
        out.print_json(hook)
        return
    out.echo(f"Updated {_said(hook)}, sending to {hook['url']}.")


@webhooks.command("delete")
@click.argument("webhook_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def delete_webhook(api: ApiClient, webhook_id: str, yes: bool) -> None:
    """Stop sending to a webhook; its delivery log goes with it."""
    if not yes:
        click.confirm(f"Delete webhook {webhook_id}?", abort=True, err=True)
    api.delete(f"/api/admin/webhooks/{part(webhook_id)}")
    out.echo(f"Deleted webhook {webhook_id}.")


def _outcome(d: dict[str, Any]) -> str:
    if d["error"]:
        return str(d["error"])
    return f"answered {d['status_code']}" if d["status_code"] else "not tried yet"


@webhooks.command("test")
@click.argument("webhook_id")
@api_options
def test_webhook(api: ApiClient, webhook_id: str) -> None:
    """Send a `test` event and wait for the receiver's answer; exit code 1 unless 2xx."""
    queued = api.post(f"/api/admin/webhooks/{part(webhook_id)}/test")
    deadline = time.monotonic() + TEST_WAIT_S
    delivery = queued
    while delivery["attempts"] == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        log = api.get(f"/api/admin/webhooks/{part(webhook_id)}/deliveries")["deliveries"]
        delivery = next((d for d in log if d["id"] == queued["id"]), delivery)
    if delivery["status"] == "delivered":
        out.echo(f"Delivered {delivery['id']}: {_outcome(delivery)}.")
        return
    if delivery["attempts"] == 0:
        raise InvalidInput(
            f"{delivery['id']} was not sent within {TEST_WAIT_S:g} s; is the orchestrator "
            f"running its webhooks loop? See: gpufleet webhooks deliveries {webhook_id}"
        )
    raise InvalidInput(
        f"{delivery['id']} was not delivered: {_outcome(delivery)}; it is retried with "
        f"backoff (gpufleet webhooks deliveries {webhook_id}); check the URL and the receiver"
    )


@webhooks.command("deliveries")
@click.argument("webhook_id")
@json_option
@api_options
def list_deliveries(api: ApiClient, webhook_id: str, as_json: bool) -> None:
    """The webhook's last 50 deliveries, newest first."""
    body = api.get(f"/api/admin/webhooks/{part(webhook_id)}/deliveries")
    if as_json:
        out.print_json(body)
        return
    rows = [
        (
            out.when(d["last_attempt_at"] or d["created_at"]),
            d["id"],
            d["event"],
            out.status(d["status"]),
            d["attempts"],
            _outcome(d),
        )
        for d in body["deliveries"]
    ]
    out.console().print(
        out.table(("TIME", "ID", "EVENT", "STATUS", "TRIES", "ANSWER"), rows, wrap="ANSWER")
    )
