"""`gpufleet secrets`: named secrets a job's env refers to (`{"secret": NAME}`), yours or a
team's. A value goes in from stdin or an environment variable, never the command line, and
never comes back out (docs/security.md, "Secrets for jobs")."""

from __future__ import annotations

import os
import sys

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.job_secrets import check_name, check_value
from gpufleet.errors import InvalidInput


@click.group()
def secrets() -> None:
    """Set, list and delete secrets for jobs (values are write-only)."""


_team_option = click.option(
    "--team", metavar="TEAM", help="A team's secret (its leads and admins), not your own."
)


def _path(name: str, team: str | None) -> str:
    check_name(name)
    if team:
        return f"/api/teams/{part(team)}/secrets/{part(name)}"
    return f"/api/secrets/{part(name)}"


def _value(from_env: str | None) -> str:
    if from_env is not None:
        value = os.environ.get(from_env, "")
        if not value:
            raise InvalidInput(f"${from_env} is empty or unset; export the secret in it first")
        return check_value(value)
    if sys.stdin.isatty():
        click.echo("Secret value (then Enter; it is not shown): ", nl=False, err=True)
        import getpass

        return check_value(getpass.getpass(prompt=""))
    text = sys.stdin.read()
    # One trailing newline is the shell's (`echo $X |`), not the secret's.
    return check_value(text[:-1] if text.endswith("\n") else text)


@secrets.command("set")
@click.argument("name")
@_team_option
@click.option(
    "--from-env",
    metavar="VAR",
    help="Read the value from this environment variable (else from stdin).",
)
@json_option
@api_options
def set_secret(
    api: ApiClient, name: str, team: str | None, from_env: str | None, as_json: bool
) -> None:
    """Set secret NAME (read from stdin, or --from-env VAR); jobs refer to it in their env
    as {"secret": "NAME"}: the submitter's own first, else their team's."""
    path = _path(name, team)
    written = api.put(path, {"value": _value(from_env)})
    if as_json:
        out.print_json(written)
        return
    owner = f"team {written['owner']}" if written["scope"] == "team" else written["owner"]
    out.console().print(f"Secret {written['name']} set for {owner}.")


@secrets.command("list")
@json_option
@api_options
def list_secrets(api: ApiClient, as_json: bool) -> None:
    """List the secrets you may see: names, whose, who wrote them; never a value."""
    body = api.get("/api/secrets")
    if as_json:
        out.print_json(body)
        return
    if not body["secrets"]:
        out.console().print("No secrets. Set one: gpufleet secrets set NAME < file")
        return
    rows = [
        (s["name"], s["scope"], s["owner"], s["written_by"], out.ago(s["updated_at"]))
        for s in body["secrets"]
    ]
    out.console().print(out.table(("NAME", "SCOPE", "OWNER", "WRITTEN BY", "WRITTEN"), rows))


@secrets.command("delete")
@click.argument("name")
@_team_option
@api_options
def delete_secret(api: ApiClient, name: str, team: str | None) -> None:
    """Delete secret NAME (yours, or --team's): jobs that refer to it are refused."""
    api.delete(_path(name, team))
    out.console().print(f"Secret {name} deleted.")
