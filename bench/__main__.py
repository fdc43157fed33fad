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
from pathlib import Path

from rich.console import Console

from bench.report import Result, print_table, write_json
from bench.scenarios import SCENARIOS, SIZES, Options
from bench.server import quiet_collector, raise_fd_limit


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
    return parser.parse_args(argv)


async def run(args: argparse.Namespace, console: Console) -> list[Result]:
    work_dir = Path(tempfile.mkdtemp(prefix="gf-bench-"))
    opts = Options(SIZES[args.size], args.database_url, work_dir, args.profile)
    results: list[Result] = []
    try:
        for number in args.scenario or sorted(SCENARIOS):
            console.print(f"[bold]scenario {number}[/] ({args.size}) …")
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
            for r in out if isinstance(out, list) else [out]:
                r.seconds = round(time.monotonic() - began, 1)
                results.append(r)
            if args.json_out:  # as it goes: a long run that stops keeps what it measured
                write_json(results, args.json_out, args.size)
    finally:
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            console.print(f"data folders kept in {work_dir}")
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_fd_limit()
    quiet_collector()
    console = Console()
    results = asyncio.run(run(args, console))
    print_table(results, console)
    if args.json_out:
        path = write_json(results, args.json_out, args.size)
        console.print(f"JSON in {path.parent}")
    failed = any(c.metric == "run" and c.ok is False for r in results for c in r.checks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
