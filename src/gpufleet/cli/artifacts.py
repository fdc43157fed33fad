"""`gpufleet jobs artifacts` and `gpufleet jobs download`: a job's stored files, listed and
brought home (the fetching itself: cli/transfer.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli import resolve
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.cli.transfer import Saved, checked_record, download_all
from gpufleet.errors import NotFound

SHA_SHOWN = 12  # hex digits of a sha256 shown in tables: enough to tell files apart


@click.command("artifacts")
@click.argument("job")
@json_option
@api_options
def artifacts(api: ApiClient, job: str, as_json: bool) -> None:
    """List JOB's stored files and checkpoints, newest attempt first.

    JOB is a job's id, or the start of one no other job's id has.
    """
    job_id = resolve.job_id(api, job)
    body = api.get(f"/api/queue/{part(job_id)}/artifacts")
    if as_json:
        out.print_json(body)
        return
    console = out.console()
    files, checkpoints = body["artifacts"], body["checkpoints"]
    if not files and not checkpoints:
        console.print(
            out.text(
                f"Job {job_id} has no stored files yet: a job's files come home when its "
                "attempt ends, its checkpoints as each completes."
            )
        )
        return
    pinned = ", pinned (kept past retention)" if body["pinned"] else ""
    console.print(
        out.text(
            f"Job {job_id}: {len(files)} file{'s' if len(files) != 1 else ''}, "
            f"{out.size(body['total_bytes'])}{pinned}"
        )
    )
    if files:
        console.print(Text("\nfiles", style="bold"))
        console.print(_files(files))
    if checkpoints:
        console.print(Text("\ncheckpoints", style="bold"))
        console.print(_checkpoints(checkpoints))
    console.print(out.text(f"\nDownload them: gpufleet jobs download {job_id} -o DIR"))


def _files(records: list[dict[str, Any]]) -> Any:
    return out.table(
        ("#", "KIND", "PATH", "SIZE", "SHA256", "CREATED"),
        [
            (
                a["attempt_number"],
                a["kind"],
                a["path"],
                out.size(a["size"]),
                a["sha256"][:SHA_SHOWN],
                out.ago(a["created_at"]),
            )
            for a in records
        ],
        wrap="PATH",
    )


def nodes_note(nodes: dict[str, Any] | None) -> str:
    """A multi-node job's checkpoint: complete, or which nodes have not committed their part."""
    if not nodes:
        return ""
    if nodes["complete"]:
        return f" (all {nodes['nodes']} nodes)"
    return f" (incomplete: node {', '.join(str(r) for r in nodes['missing'])} missing)"


def _checkpoints(records: list[dict[str, Any]]) -> Any:
    return out.table(
        ("#", "NAME", "STEP", "FILES", "SIZE", "PATH", "CREATED"),
        [
            (
                c["attempt_number"],
                c["name"],
                c["step"],
                c["files"],
                out.size(c["size"]),
                c["path"] + nodes_note(c.get("nodes")),
                out.ago(c["created_at"]),
            )
            for c in records
        ],
        wrap="PATH",
    )


@click.command("download")
@click.argument("job")
@click.argument("paths", nargs=-1, metavar="[PATH|GLOB]...")
@click.option(
    "-o",
    "--output",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="The folder to save into; each file keeps its path under it.",
)
@click.option(
    "--attempt",
    type=click.IntRange(1),
    metavar="N",
    help="Only attempt N's files.",
    show_default="each path from the newest attempt that has it",
)
@click.option("--no-checkpoints", is_flag=True, help="Leave the checkpoints' files out.")
@json_option
@api_options
def download(
    api: ApiClient,
    job: str,
    paths: tuple[str, ...],
    directory: Path,
    attempt: int | None,
    no_checkpoints: bool,
    as_json: bool,
) -> None:
    """Download JOB's stored files into a folder, each checked against its sha256.

    With no PATH, every file; a PATH names a file or a folder (`output`), a GLOB matches
    paths (`*` within a folder, `**` across folders: 'output/**/*.safetensors'). A file is
    written beside its place and moved there only once its sha256 matches the listed one; a
    file already there with that sha256 is left as it is.
    """
    job_id = resolve.job_id(api, job)
    saved = fetch_files(api, job_id, directory, paths, attempt, no_checkpoints)
    if as_json:
        out.print_json(
            {
                "job_id": job_id,
                "directory": str(directory),
                "files": [s.as_json() for s in saved],
            }
        )
        return
    out.echo(summary(job_id, saved, directory))


def fetch_files(
    api: ApiClient,
    job_id: str,
    directory: Path,
    paths: tuple[str, ...] = (),
    attempt: int | None = None,
    no_checkpoints: bool = False,
) -> list[Saved]:
    """The job's stored files (those `paths` name; all when none) into `directory`, each
    checked against its sha256; `NotFound` when it has none."""
    listed = [
        checked_record(r) for r in api.get(f"/api/queue/{part(job_id)}/artifacts")["artifacts"]
    ]
    chosen = select(listed, paths, attempt, checkpoints=not no_checkpoints)
    if not chosen:
        raise NotFound(
            f"job {job_id} has no stored files{_which(attempt, no_checkpoints)} to download; "
            f"see what it has: gpufleet jobs artifacts {job_id}"
        )
    again = ["gpufleet", "jobs", "download", job_id, *paths, "-o", str(directory)]
    again += [f"--attempt={attempt}"] if attempt else []
    again += ["--no-checkpoints"] if no_checkpoints else []
    return download_all(api, job_id, chosen, directory, again=shlex.join(again))


def _which(attempt: int | None, no_checkpoints: bool) -> str:
    said = [f" from attempt {attempt}"] if attempt else []
    return "".join(said) + (" other than checkpoints" if no_checkpoints else "")


def summary(job_id: str, saved: list[Saved], directory: Path) -> str:
    fetched = [s for s in saved if s.fetched]
    kept = len(saved) - len(fetched)
    line = (
        f"Downloaded {len(fetched)} file{'s' if len(fetched) != 1 else ''} "
        f"({out.size(sum(s.size for s in fetched))}) of job {job_id} into {directory}"
    )
    if kept:
        line += f"; {kept} already there with the same sha256"
    return line + "; every sha256 matches."


def select(
    listed: list[dict[str, Any]],
    patterns: tuple[str, ...],
    attempt: int | None,
    *,
    checkpoints: bool = True,
) -> list[dict[str, Any]]:
    """The records to download, by path: each path once, from the newest attempt that has it
    (or from `attempt`), those `patterns` match (all when none are given)."""
    newest: dict[str, dict[str, Any]] = {}
    for record in sorted(listed, key=lambda a: -int(a["attempt_number"])):
        if attempt is not None and record["attempt_number"] != attempt:
            continue
        if not checkpoints and record["kind"] == "checkpoint":
            continue
        newest.setdefault(record["path"], record)
    if not patterns:
        return [newest[p] for p in sorted(newest)]
    matchers = {p: _matcher(p) for p in patterns}
    unmatched = [p for p, m in matchers.items() if not any(m(path) for path in newest)]
    if unmatched:
        raise NotFound(
            f"no stored file of this job matches {', '.join(repr(p) for p in unmatched)}; "
            "list them with `gpufleet jobs artifacts JOB` and give a path, a folder or a glob "
            "from it"
        )
    return [newest[p] for p in sorted(newest) if any(m(p) for m in matchers.values())]


def _matcher(pattern: str) -> Any:
    """A path test for a PATH argument: the path itself, a folder above it, or a glob."""
    clean = pattern.removeprefix("./").rstrip("/")
    regex = re.compile(_glob_regex(clean))

    def matches(path: str) -> bool:
        return path == clean or path.startswith(clean + "/") or bool(regex.fullmatch(path))

    return matches


_GLOB_TOKEN = re.compile(r"\*\*/|\*\*|\*|\?|[^*?]+")


def _glob_regex(glob: str) -> str:
    parts = []
    for token in _GLOB_TOKEN.findall(glob):
        if token == "**/":
            parts.append("(?:.*/)?")
        elif token == "**":
            parts.append(".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(token))
    return "".join(parts)
