"""`gpufleet configs`: stored job configs, submitted later by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.errors import InvalidInput


def read_config_file(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or one line saying what is wrong with the file."""
    try:
        body = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid JSON: {exc}; fix the file and try again") from exc
    if not isinstance(body, dict):
        raise InvalidInput(
            f"{path} holds a JSON {type(body).__name__}, not an object like "
            '{"command": ["python", "train.py"]}'
        )
    return body


@click.group()
def configs() -> None:
    """Store job configs on the orchestrator and submit them by name."""


@configs.command("list")
@json_option
@api_options
def list_configs(api: ApiClient, as_json: bool) -> None:
    """List stored configs: whose each is, the team it is shared with, its latest version."""
    body = api.get("/api/configs")
    if as_json:
        out.print_json(body)
        return
    if not body["configs"]:
        out.console().print("No configs. Store one: gpufleet configs put FILE")
        return
    rows = [
        (
            c["name"],
            _command(c["config"]),
            c["config"].get("gpu_count", c["config"].get("num_processes")),
            c["owner"],
            c["team"] or "-",
            f"v{c['version']}",
            out.ago(c["updated_at"]),
        )
        for c in body["configs"]
    ]
    columns = ("NAME", "COMMAND", "GPUS", "OWNER", "TEAM", "VERSION", "UPDATED")
    out.console().print(out.table(columns, rows))


@configs.command("show")
@click.argument("name")
@click.option("--version", "version", type=click.IntRange(min=1), help="An older version.")
@json_option
@api_options
def show_config(api: ApiClient, name: str, version: int | None, as_json: bool) -> None:
    """Print one stored config's JSON body (--json adds its owner, team, version and times)."""
    path = f"/api/configs/{part(name)}"
    body = api.get(f"{path}/versions/{version}" if version else path)
    out.print_json(body if as_json else body["config"])


@configs.command("versions")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@json_option
@api_options
def config_versions(api: ApiClient, name: str, limit: int, as_json: bool) -> None:
    """List a stored config's versions, newest first: who wrote each, when, its digest."""
    body = api.get(f"/api/configs/{part(name)}/versions", limit=limit)
    if as_json:
        out.print_json(body)
        return
    rows = [
        (f"v{v['version']}", v["written_by"] or "-", out.when(v["written_at"]), v["digest"][:12])
        for v in body["versions"]
    ]
    out.console().print(out.table(("VERSION", "WRITTEN BY", "WRITTEN", "SHA256"), rows))
    out.echo(f"Read one: gpufleet configs show {name} --version N")


@configs.command("put")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Store under this name.", show_default="the file's name")
@click.option(
    "--team",
    help="Share it with this team of yours (id or name): its leads may change it too.",
    show_default="as it was; none for a new config",
)
@click.option("--no-team", is_flag=True, help="Stop sharing it with a team.")
@json_option
@api_options
def put_config(
    api: ApiClient, file: Path, name: str | None, team: str | None, no_team: bool, as_json: bool
) -> None:
    """Store the JSON config in FILE as a new config (yours) or the next version of one
    you may change (yours, your team's as its lead, or any as an admin)."""
    if team is not None and no_team:
        raise click.UsageError("give --team or --no-team, not both")
    name = name or file.stem
    share = "" if no_team else team
    body = api.put(f"/api/configs/{part(name)}", read_config_file(file), team=share)
    if as_json:
        out.print_json(body)
        return
    shared = f", shared with team {body['team']}" if body["team"] else ""
    out.echo(
        f"Stored config {body['name']} v{body['version']} (owner {body['owner']}{shared}). "
        f"Submit it: gpufleet jobs submit {body['name']}"
    )


@configs.command("delete")
@click.argument("name")
@api_options
def delete_config(api: ApiClient, name: str) -> None:
    """Delete a stored config and its versions (jobs already submitted keep their copy)."""
    api.delete(f"/api/configs/{part(name)}")
    out.echo(f"Deleted config {name}.")


def _command(config: dict[str, Any]) -> str:
    command = config.get("command")
    if isinstance(command, list):
        return " ".join(str(part) for part in command)
    return "python -m simpletuner.train" if command is None else str(command)
