"""`gpufleet keys`: API keys for people and scripts (needs a key with `*`)."""

from __future__ import annotations

from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.permissions import PERMISSION_HELP
from gpufleet.errors import InvalidInput, NotFound

_PERMISSIONS = ", ".join(f"{p} ({text})" for p, text in PERMISSION_HELP.items())


@click.group()
def keys() -> None:
    """Create, list and revoke API keys."""


@keys.command("list")
@json_option
@api_options
def list_keys(api: ApiClient, as_json: bool) -> None:
    """List API keys (never their secret)."""
    body = api.get("/api/admin/api-keys")
    if as_json:
        out.print_json(body)
        return
    rows = [
        (
            k["id"],
            k["name"],
            k.get("user"),
            ",".join(k["permissions"]),
            out.ago(k["created_at"]),
            out.ago(k.get("last_used_at")) if k.get("last_used_at") else "never",
            out.status("revoked" if k["revoked"] else "active"),
        )
        for k in body
    ]
    out.console().print(
        out.table(("ID", "NAME", "USER", "PERMISSIONS", "CREATED", "LAST USED", "STATUS"), rows)
    )


@keys.command("create")
@click.argument("name")
@click.option(
    "--permission",
    "-p",
    "permissions",
    multiple=True,
    required=True,
    type=click.Choice(list(PERMISSION_HELP)),
    help=f"A permission to grant (repeat for several): {_PERMISSIONS}.",
)
@click.option(
    "--user",
    help="Whose key it is (a user's id or name); default: yours. It may do no more than "
    "their level allows.",
)
@json_option
@api_options
def create_key(
    api: ApiClient, name: str, permissions: tuple[str, ...], user: str | None, as_json: bool
) -> None:
    """Create an API key NAME; it is printed once."""
    body = api.post(
        "/api/admin/api-keys", {"name": name, "permissions": list(permissions), "user": user}
    )
    if as_json:
        out.print_json(body)
        return
    out.echo(
        f"Created API key {body['name']} ({body['id']}) of user {body['user']}: "
        f"{', '.join(body['permissions'])}."
    )
    out.echo(f"Key (shown only once): {body['key']}")
    out.echo("Use it with --api-key or GPUFLEET_API_KEY, or to sign in to the web UI.")


def _find(api: ApiClient, wanted: str) -> dict[str, Any]:
    """The active key with this id, or with this name when only one has it."""
    active = [k for k in api.get("/api/admin/api-keys") if not k["revoked"]]
    by_id = [k for k in active if k["id"] == wanted]
    found = by_id or [k for k in active if k["name"] == wanted]
    if not found:
        raise NotFound(f"no active API key {wanted}; see them with: gpufleet keys list")
    if len(found) > 1:
        ids = ", ".join(k["id"] for k in found)
        raise InvalidInput(f"{len(found)} active keys are named {wanted} ({ids}); give the id")
    key: dict[str, Any] = found[0]
    return key


@keys.command("revoke")
@click.argument("key")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def revoke_key(api: ApiClient, key: str, yes: bool) -> None:
    """Revoke KEY (an id, or a unique name): it stops working at once."""
    found = _find(api, key)
    if not yes:
        click.confirm(f"Revoke API key {found['name']} ({found['id']})?", abort=True, err=True)
    api.delete(f"/api/admin/api-keys/{part(found['id'])}")
    out.echo(f"Revoked API key {found['name']} ({found['id']}).")
