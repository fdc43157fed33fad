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
    """List stored configs."""
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
            out.ago(c["updated_at"]),
        )
        for c in body["configs"]
    ]
    out.console().print(out.table(("NAME", "COMMAND", "GPUS", "UPDATED"), rows))


@configs.command("show")
@click.argument("name")
@json_option
@api_options
def show_config(api: ApiClient, name: str, as_json: bool) -> None:
    """Print one stored config (its JSON body; --json adds the name and times)."""
    body = api.get(f"/api/configs/{part(name)}")
    out.print_json(body if as_json else body["config"])


@configs.command("put")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Store under this name.", show_default="the file's name")
@json_option
@api_options
def put_config(api: ApiClient, file: Path, name: str | None, as_json: bool) -> None:
    """Store the JSON config in FILE (create or replace)."""
    name = name or file.stem
    body = api.put(f"/api/configs/{part(name)}", read_config_file(file))
    if as_json:
        out.print_json(body)
    else:
        out.echo(f"Stored config {body['name']}. Submit it: gpufleet jobs submit {body['name']}")


@configs.command("delete")
@click.argument("name")
@api_options
def delete_config(api: ApiClient, name: str) -> None:
    """Delete a stored config (jobs already submitted keep their copy)."""
    api.delete(f"/api/configs/{part(name)}")
    out.echo(f"Deleted config {name}.")


def _command(config: dict[str, Any]) -> str:
    command = config.get("command")
    if isinstance(command, list):
        return " ".join(str(part) for part in command)
    return "python -m simpletuner.train" if command is None else str(command)
