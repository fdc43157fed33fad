"""`gpufleet sweeps`: list, show, cancel and re-run sweeps as one; and the `--sweep` options
`gpufleet run` takes (docs/jobs.md, Sweeps)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.sweeps import MAX_PARALLEL, MAX_POINTS, PARAM_NAME, Scalar

# ---- the options of `gpufleet run` ------------------------------------------------------------


def _value(text: str) -> Scalar:
    """`1e-4` → 0.0001, `16` → 16, `true` → True; anything else the text itself."""
    try:
        found = json.loads(text)
    except ValueError:
        return text
    return found if isinstance(found, bool | int | float) else text


def parse_sweep(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, list[Scalar]]:
    sweep: dict[str, list[Scalar]] = {}
    for value in values:
        name, sep, listed = value.partition("=")
        if not sep or not PARAM_NAME.fullmatch(name) or not listed:
            raise click.BadParameter(
                f"{value!r} is not NAME=V1,V2,… with a NAME of letters, digits and '_'",
                ctx=ctx,
                param=param,
            )
        if name in sweep:
            raise click.BadParameter(f"{name} is swept twice: list its values once", ctx=ctx)
        sweep[name] = [_value(v) for v in listed.split(",")]
    return sweep


_OPTIONS = (
    click.option(
        "--sweep",
        "sweep",
        multiple=True,
        metavar="NAME=V1,V2,…",
        callback=parse_sweep,
        help="Run one job a point of the grid of these values (repeatable: one a parameter); "
        "{NAME} in the command, --env values and config is replaced by the point's value. "
        f"At most {MAX_POINTS} points.",
    ),
    click.option(
        "--samples",
        type=click.IntRange(1, MAX_POINTS),
        help="With --sweep: run this many points of the grid, drawn at random.",
    ),
    click.option(
        "--max-parallel",
        type=click.IntRange(1, MAX_PARALLEL),
        help="With --sweep: at most this many of its jobs run at once.",
    ),
)


def sweep_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --sweep, --samples and --max-parallel; hands the command `sweep`: the submit
    body's sweep fields (empty without --sweep)."""

    @functools.wraps(command)
    def run(
        *args: Any,
        sweep: dict[str, list[Scalar]],
        samples: int | None,
        max_parallel: int | None,
        **kwargs: Any,
    ) -> Any:
        if not sweep and (samples is not None or max_parallel is not None):
            raise click.UsageError("--samples and --max-parallel go with --sweep NAME=V1,V2")
        body: dict[str, Any] = {}
        if sweep:
            body = {"sweep": sweep, "sweep_samples": samples, "max_parallel": max_parallel}
        return command(*args, sweep=body, **kwargs)

    for option in reversed(_OPTIONS):
        run = option(run)
    return run


def say_made(made: dict[str, Any]) -> None:
    grid = " x ".join(f"{name} ({len(values)})" for name, values in made["params"].items())
    out.echo(f"Submitted sweep {made['id']}: {made['size']} jobs of {grid}.")
    out.echo(f"Watch it: gpufleet sweeps show {made['id']}")


# ---- gpufleet sweeps --------------------------------------------------------------------------


@click.group()
def sweeps() -> None:
    """Watch, cancel and re-run sweeps (made by `gpufleet run --sweep`)."""


def _counts(s: dict[str, Any]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(s["counts"].items()))


@sweeps.command("list")
@click.option("--mine", is_flag=True, help="Only yours.")
@click.option("--limit", type=click.IntRange(1, 200), default=50, help="At most this many.")
@json_option
@api_options
def list_sweeps(api: ApiClient, mine: bool, limit: int, as_json: bool) -> None:
    """List sweeps, newest first."""
    body = api.get("/api/sweeps", mine=mine or None, limit=limit)
    if as_json:
        out.print_json(body)
        return
    console = out.console()
    if not body["sweeps"]:
        console.print("No sweeps. Make one: gpufleet run --sweep lr=1e-4,3e-4 -- CMD --lr {lr}")
        return
    rows = [
        (
            s["id"],
            out.status(s["status"]),
            " x ".join(s["params"]),
            s["size"],
            _counts(s),
            s.get("user") or "-",
            out.ago(s["created_at"]),
        )
        for s in body["sweeps"]
    ]
    console.print(out.table(["ID", "STATUS", "PARAMS", "JOBS", "BY STATUS", "USER", "MADE"], rows))


@sweeps.command("show")
@click.argument("sweep_id")
@click.option("--sort", "sort_by", metavar="METRIC", help="Order the jobs by this metric.")
@json_option
@api_options
def show(api: ApiClient, sweep_id: str, sort_by: str | None, as_json: bool) -> None:
    """Show a sweep: each point's job, its parameters and final metrics."""
    s = api.get(f"/api/sweeps/{part(sweep_id)}")
    if as_json:
        out.print_json(s)
        return
    console = out.console()
    limit = f", at most {s['max_parallel']} at once" if s["max_parallel"] else ""
    console.print(out.text(f"sweep {s['id']}: {s['status']} ({_counts(s)}{limit})"))
    params, metrics = list(s["params"]), s["metrics"] or []
    jobs = s["jobs"] or []
    if sort_by:
        jobs.sort(key=lambda j: (sort_by not in j["metrics"], j["metrics"].get(sort_by, 0)))
    rows = [
        (
            j["job_id"],
            out.status(j["status"]),
            *(j["params"].get(p) for p in params),
            *(_number(j["metrics"].get(m)) for m in metrics),
        )
        for j in jobs
    ]
    columns = ["JOB", "STATUS", *params, *(m.upper() for m in metrics)]
    console.print(out.table(columns, rows, wrap="JOB"))


def _number(value: float | None) -> str | None:
    return None if value is None else f"{value:.4g}"


def _acted(body: dict[str, Any], as_json: bool, verb: str) -> None:
    if as_json:
        out.print_json(body)
    else:
        for r in body["results"]:
            if r["ok"] and r["new_job_id"]:
                out.echo(f"Job {r['job_id']} re-runs as {r['new_job_id']}.")
            elif r["ok"]:
                out.echo(f"Job {r['job_id']} is {verb}.")
            else:
                out.echo(f"Job {r['job_id']}: {r['error']}")
        out.echo(f"Sweep {body['sweep']['id']} is {body['sweep']['status']}.")
    if body["failed"]:
        sys.exit(1)


@sweeps.command("cancel")
@click.argument("sweep_id")
@json_option
@api_options
def cancel(api: ApiClient, sweep_id: str, as_json: bool) -> None:
    """Cancel every job of the sweep not ended yet."""
    _acted(api.post(f"/api/sweeps/{part(sweep_id)}/cancel"), as_json, "cancelled")


@sweeps.command("rerun")
@click.argument("sweep_id")
@json_option
@api_options
def rerun(api: ApiClient, sweep_id: str, as_json: bool) -> None:
    """Re-run the sweep's failed and cancelled jobs, in the sweep."""
    _acted(api.post(f"/api/sweeps/{part(sweep_id)}/rerun"), as_json, "re-run")
