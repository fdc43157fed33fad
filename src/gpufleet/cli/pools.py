"""`gpufleet pools`: workers the orchestrator may launch (needs a key with `*`; see
docs/capacity.md). A pool is stored, checked and shown with its launches (a provider's
stderr included); the leader launches and retires its workers."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.cli.options import DURATION, parse_labels
from gpufleet.domain.pools import ProviderType
from gpufleet.domain.states import WorkerType
from gpufleet.errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])
NONE = "none"  # `--max-cost none`, `--gpu-name none`: cleared
# Each provider's options: the field it sets, and whether a new provider of the type needs it.
PROVIDER_OPTIONS: dict[ProviderType, dict[str, tuple[str, bool]]] = {
    ProviderType.LOCAL: {},
    ProviderType.COMMAND: {
        "launch": ("launch", True),
        "terminate": ("terminate", True),
        "list_cmd": ("list", False),
    },
    ProviderType.SLURM: {
        "partition": ("partition", True),
        "time_limit": ("time_limit", True),
        "account": ("account", False),
        "worker_command": ("command", False),
    },
}
ARGV = {"launch", "terminate", "list_cmd", "worker_command"}
STDERR_SHOWN = 3  # the newest launches whose provider's stderr `show` prints
STDERR_LINES = 10  # the end of each


@click.group()
def pools() -> None:
    """Create, change and delete worker pools: workers the orchestrator may launch for the
    queue, within a pool's min and max (docs/capacity.md)."""


def _flag(key: str) -> str:
    return "--" + {"list_cmd": "list"}.get(key, key).replace("_", "-")


def _argv(key: str, line: str) -> list[str]:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise InvalidInput(f"{_flag(key)} {line!r} is not a command line: {exc}") from None
    if not argv:
        raise InvalidInput(f"{_flag(key)} is empty; give the command to run, e.g. /opt/launch.sh")
    return argv


def _provider(kind: str, given: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
    """The provider the options make: `current`'s fields (when the type stays) under those
    given; each option of another type refused."""
    ptype = ProviderType(kind)
    mine = PROVIDER_OPTIONS[ptype]
    for key, value in given.items():
        if value is not None and key not in mine:
            owner = next(t for t, keys in PROVIDER_OPTIONS.items() if key in keys)
            raise InvalidInput(f"{_flag(key)} is for a {owner.value} provider, not {kind}")
    base: dict[str, Any] = (
        dict(current) if current and current.get("type") == kind else {"type": kind}
    )
    for key, (field, needed) in mine.items():
        value = given.get(key)
        if value is not None:
            base[field] = _argv(key, value) if key in ARGV else value
        elif needed and field not in base:
            raise InvalidInput(f"a {kind} provider needs {_flag(key)}")
    return base


def _pool_options(*, create: bool) -> Callable[[F], F]:
    """The options of `create` and `update` (for update, each one given changes its field)."""
    options: list[Callable[[Any], Any]] = [
        click.option(
            "--provider",
            type=click.Choice([t.value for t in ProviderType]),
            required=create,
            help="What launches its workers: local (gpufleet worker processes here), command "
            "(your commands) or slurm (batch jobs).",
        ),
        click.option("--launch", metavar="CMD", help="command: starts a machine (a shell line)."),
        click.option(
            "--terminate", metavar="CMD", help="command: stops one ($GPUFLEET_INSTANCE_ID)."
        ),
        click.option(
            "--list", "list_cmd", metavar="CMD", help="command: lists instances, to find strays."
        ),
        click.option("--partition", help="slurm: the partition its batch jobs go to."),
        click.option("--time-limit", help="slurm: each batch job's --time, e.g. 4:00:00."),
        click.option("--account", help="slurm: the account charged."),
        click.option(
            "--worker-command", metavar="CMD", help="slurm: what its jobs run (gpufleet worker)."
        ),
        click.option(
            "--label",
            "-l",
            "labels",
            multiple=True,
            callback=parse_labels,
            help="key=value, repeatable: its workers' labels"
            + ("." if create else " (given, they replace the pool's)."),
        ),
        click.option("--gpus", "gpu_count", type=int, help="GPUs each of its workers has."),
        click.option("--gpu-name", help="What they are, e.g. 'NVIDIA H100' ('none': unsaid)."),
        click.option(
            "--worker-type",
            type=click.Choice([t.value for t in WorkerType]),
            help="ephemeral (one job, then gone) or persistent (stays).",
        ),
        click.option("--min", "min_workers", type=int, help="Workers kept up, even idle."),
        click.option(
            "--max", "max_workers", type=int, required=create, help="Workers up or on their way."
        ),
        click.option(
            "--idle-timeout", type=DURATION, help="Retire a worker above min idle this long (5m)."
        ),
        click.option(
            "--launch-timeout", type=DURATION, help="Give up on a launch unregistered by then."
        ),
        click.option("--price", "price_per_hour", type=float, help="One worker's cost an hour."),
        click.option("--max-cost", help="Launch none past this cost an hour ('none': no limit)."),
        click.option("--enable/--disable", "enabled", default=None, help="Whether it may launch."),
        json_option,
        api_options,
    ]

    def decorate(command: F) -> F:
        decorated: Any = command
        for option in reversed(options):
            decorated = option(decorated)
        return cast(F, decorated)

    return decorate


def _number(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidInput(
            f"--{name} {value!r} is not a number; give e.g. 12.5, or 'none'"
        ) from None


def _fields(o: dict[str, Any], *, create: bool) -> dict[str, Any]:
    """The pool's fields the options give (those not given left out)."""
    body: dict[str, Any] = {}
    for key in ("gpu_count", "worker_type", "min_workers", "max_workers", "price_per_hour"):
        if o[key] is not None:
            body[key] = o[key]
    if o["labels"] or create:
        body["labels"] = o["labels"]
    for key in ("idle_timeout", "launch_timeout"):
        if o[key] is not None:
            body[f"{key}_s"] = round(o[key])
    if o["gpu_name"] is not None:
        body["gpu_name"] = None if o["gpu_name"] == NONE else o["gpu_name"]
    if o["max_cost"] is not None:
        body["max_cost_per_hour"] = (
            None if o["max_cost"] == NONE else _number("max-cost", o["max_cost"])
        )
    if o["enabled"] is not None:
        body["enabled"] = o["enabled"]
    return body


def _provider_given(o: dict[str, Any]) -> dict[str, Any]:
    return {key: o[key] for keys in PROVIDER_OPTIONS.values() for key in keys}


def _range(p: dict[str, Any]) -> str:
    return f"{p['min_workers']}..{p['max_workers']}"


def _said(p: dict[str, Any]) -> str:
    labels = out.safe(", ".join(f"{k}={v}" for k, v in p["labels"].items()) or "no labels")
    return (
        f"pool {p['name']}: {p['provider']['type']} provider, {_range(p)} {p['worker_type']} "
        f"workers of {p['gpu_count']} GPU(s) ({labels}), {p['price_per_hour']:g} an hour"
    )


@pools.command("list")
@json_option
@api_options
def list_pools(api: ApiClient, as_json: bool) -> None:
    """List the pools, with their launches up or on their way (LIVE)."""
    body = api.get("/api/admin/pools")
    if as_json:
        out.print_json(body)
        return
    if not body["pools"]:
        out.echo("No pools. Create one: gpufleet pools create NAME --provider local --max 2")
        return
    rows = [
        (
            p["name"],
            p["provider"]["type"],
            p["labels"],
            p["gpu_count"],
            p["worker_type"],
            _range(p),
            p["live_launches"],
            f"{p['price_per_hour']:g}",
            "yes" if p["enabled"] else "no",
        )
        for p in body["pools"]
    ]
    heads = ("NAME", "PROVIDER", "LABELS", "GPUS", "TYPE", "MIN..MAX", "LIVE", "PRICE/H", "ENABLED")
    out.console().print(out.table(heads, rows, wrap="LABELS"))


def _print_pool(p: dict[str, Any]) -> None:
    provider = " ".join(
        f"{k}={shlex.join(v) if isinstance(v, list) else v}"
        for k, v in p["provider"].items()
        if k != "type"
    )
    cost = p["max_cost_per_hour"]
    out.console().print(
        out.fields(
            [
                ("name", p["name"]),
                ("provider", f"{p['provider']['type']} {provider}".strip()),
                ("labels", p["labels"]),
                ("gpus", f"{p['gpu_count']} {p['gpu_name'] or ''}".strip()),
                ("worker type", p["worker_type"]),
                ("workers", f"{_range(p)} ({p['live_launches']} up or launching)"),
                ("idle timeout", f"{p['idle_timeout_s']} s"),
                ("launch timeout", f"{p['launch_timeout_s']} s"),
                ("price", f"{p['price_per_hour']:g} an hour"),
                ("max cost", "no limit" if cost is None else f"{cost:g} an hour"),
                ("enabled", "yes" if p["enabled"] else "no"),
                ("created", f"{out.when(p['created_at'])} by {p['created_by'] or '-'}"),
            ]
        )
    )
    if p.get("launches"):
        rows = [
            (
                out.when(x["created_at"]),
                x["id"],
                out.status(x["state"]),
                x["instance_id"],
                x["worker_id"],
                x["error"],
            )
            for x in p["launches"]
        ]
        heads = ("LAUNCHED", "ID", "STATE", "INSTANCE", "WORKER", "ERROR")
        out.console().print(out.table(heads, rows, wrap="ERROR"))
    for x in [x for x in p.get("launches") or [] if x.get("stderr")][:STDERR_SHOWN]:
        out.echo(f"\nThe provider's stderr for launch {x['id']} ({x['state']}), its end:")
        for line in x["stderr"].rstrip("\n").splitlines()[-STDERR_LINES:]:
            out.echo(f"  {line}")


@pools.command("show")
@click.argument("name")
@json_option
@api_options
def show_pool(api: ApiClient, name: str, as_json: bool) -> None:
    """Show one pool and its newest launches."""
    body = api.get(f"/api/admin/pools/{part(name)}")
    if as_json:
        out.print_json(body)
        return
    _print_pool(body)


@pools.command("create")
@click.argument("name")
@_pool_options(create=True)
def create_pool(api: ApiClient, name: str, provider: str, as_json: bool, **o: Any) -> None:
    """Create the pool NAME, e.g. gpufleet pools create burst --provider command --launch
    /opt/launch.sh --terminate /opt/terminate.sh -l pool=burst --max 4 --price 1.89"""
    body = {"name": name, "provider": _provider(provider, _provider_given(o), None)}
    pool = api.post("/api/admin/pools", body | _fields(o, create=True))
    if as_json:
        out.print_json(pool)
        return
    out.echo(f"Created {_said(pool)}.")


@pools.command("update")
@click.argument("name")
@_pool_options(create=False)
def update_pool(api: ApiClient, name: str, provider: str | None, as_json: bool, **o: Any) -> None:
    """Change the pool NAME; what is not given stays (a provider's other fields too)."""
    body = _fields(o, create=False)
    given = _provider_given(o)
    if provider is not None or any(v is not None for v in given.values()):
        current = api.get(f"/api/admin/pools/{part(name)}")["provider"]
        body["provider"] = _provider(provider or current["type"], given, current)
    if not body:
        raise click.UsageError("give something to change, e.g. --max 8 or --disable")
    pool = api.patch(f"/api/admin/pools/{part(name)}", body)
    if as_json:
        out.print_json(pool)
        return
    out.echo(f"Updated {_said(pool)}.")


@pools.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def delete_pool(api: ApiClient, name: str, yes: bool) -> None:
    """Delete the pool NAME; refused while a launch of it may have a machine up."""
    if not yes:
        click.confirm(f"Delete pool {name}?", abort=True, err=True)
    api.delete(f"/api/admin/pools/{part(name)}")
    out.echo(f"Deleted pool {name}.")
