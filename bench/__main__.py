"""`python -m bench`: run scenarios against a real server, print the table, write JSON."""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from bench.compare import Side, Sides, markdown_comparison, print_comparison, sides, summary
from bench.report import Result, print_table, write_json
from bench.scenarios import SCENARIOS, SIZES, Options
from bench.server import quiet_collector, raise_fd_limit
from gpufleet.errors import ConfigurationError


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--scenario",
        type=int,
        action="append",
        choices=sorted(SCENARIOS),
        help="scenario to run (repeatable; default: all)",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument(
        "--database-url",
        default=None,
        help="run scenarios 1-5, 8, 10 and 11 on this database (default: SQLite in a temporary "
        "folder); it should be empty, the scenarios add workers and jobs",
    )
    parser.add_argument("--json-out", type=Path, default=None, help="folder for JSON results")
    parser.add_argument("--keep", action="store_true", help="keep the servers' data folders")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="folder for py-spy samples of each server (collapsed stacks; needs py-spy)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of gpufleet (e.g. a `git worktree add` of an older commit): each "
        "scenario runs against a server of its code, then of this checkout's, in turn; the "
        "table gives both sides' figures and current ÷ baseline",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --baseline: baseline then current, this many times a scenario (default 1)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.baseline is not None:
        try:
            sides(args.baseline)
        except ConfigurationError as exc:
            parser.error(exc.message)
    return args


IN_PROCESS = {12}  # no server: the harness's code on both sides, nothing to compare


async def run(
    args: argparse.Namespace, console: Console, compared: Sides | None = None
) -> list[Result]:
    """Each scenario once, or (`compared`: --baseline) on each side in turn."""
    work_dir = Path(tempfile.mkdtemp(prefix="gf-bench-"))
    opts = Options(SIZES[args.size], args.database_url, work_dir, args.profile)
    results: list[Result] = []
    # Each scenario once as before, or (--baseline) round by round, baseline then current.
    turns: list[tuple[Side | None, int]] = [(None, 0)]
    if compared:
        turns = [(side, n) for n in range(args.rounds) for side in compared]
    try:
        for number in args.scenario or sorted(SCENARIOS):
            if compared and number in IN_PROCESS:
                console.print(f"[yellow]scenario {number} starts no server: left out of --baseline")
                continue
            for side, n in turns:
                where = f", {side.name}, round {n + 1}" if side else ""
                console.print(f"[bold]scenario {number}[/] ({args.size}{where}) …")
                on = replace(opts, code=side.src) if side else opts
                for r in await _scenario(number, on, console):
                    r.side, r.round = (side.name, n) if side else ("", 0)
                    results.append(r)
                if args.json_out:  # as it goes: a long run that stops keeps what it measured
                    _write(results, args, compared)
    finally:
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            console.print(f"data folders kept in {work_dir}")
    return results


async def _scenario(number: int, opts: Options, console: Console) -> list[Result]:
    began = time.monotonic()
    gc.collect()  # the harness collects between scenarios, not while it measures
    try:
        out = await SCENARIOS[number](opts)
    except Exception as exc:
        console.print(f"[red]scenario {number} failed: {exc!r}")
        console.print(traceback.format_exc(), markup=False, highlight=False)
        failed = Result(str(number), SCENARIOS[number].__name__, opts.database, {})
        failed.check("run", repr(exc)[:80], "completes", False)
        out = failed
    done = out if isinstance(out, list) else [out]
    for r in done:
        r.seconds = round(time.monotonic() - began, 1)
    return done


def _write(results: list[Result], args: argparse.Namespace, compared: Sides | None) -> Path:
    if compared is None:
        return write_json(results, args.json_out, args.size)
    base, cur = compared
    return write_json(
        results,
        args.json_out,
        args.size,
        summary(results, base, cur, args.rounds),
        markdown_comparison(results, base, cur, args.rounds),
    )


def report(
    results: list[Result], args: argparse.Namespace, compared: Sides | None, console: Console
) -> int:
    """The table on `console`, the JSON (--json-out); 1 where a scenario failed to run."""
    if compared:
        print_comparison(results, *compared, args.rounds, console)
    else:
        print_table(results, console)
    if args.json_out:
        path = _write(results, args, compared)
        console.print(f"JSON in {path.parent}")
    failed = any(c.metric == "run" and c.ok is False for r in results for c in r.checks)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_fd_limit()
    quiet_collector()
    console = Console()
    compared = sides(args.baseline) if args.baseline else None  # their commits as they begin
    results = asyncio.run(run(args, console, compared))
    return report(results, args, compared, console)


if __name__ == "__main__":
    sys.exit(main())
