"""`gpufleet jobs artifacts` and `gpufleet jobs download`: a job's stored files, listed and
brought home (by the client: client/downloads.py, client/transfer.py; shown here with a
progress bar, `Bar`)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import click
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli import resolve
from gpufleet.cli.api import ApiClient, Client, api_options, json_option, part
from gpufleet.client.transfer import Saved

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
    api: Client,
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
    saved = api.download(
        job_id, directory, *paths, attempt=attempt, checkpoints=not no_checkpoints, meter=Bar()
    )
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


class Bar:
    """A download's progress as a bar on stderr (the client's `Meter`)."""

    def __init__(self) -> None:
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=out.errors(),
        )
        self._task: TaskID | None = None

    def __enter__(self) -> Bar:
        self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.__exit__(exc_type, exc, tb)

    def start(self, label: str, total: int) -> None:
        self._task = self._bar.add_task(label, total=total)

    def label(self, label: str) -> None:
        if self._task is not None:
            self._bar.update(self._task, description=label)

    def advance(self, count: int) -> None:
        if self._task is not None:
            self._bar.advance(self._task, count)
