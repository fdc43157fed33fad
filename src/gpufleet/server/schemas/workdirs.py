"""The bodies of the workdir snapshot routes (docs/jobs.md)."""

from __future__ import annotations

from datetime import datetime

from gpufleet.artifacts.workdir_listing import Kind, Shown
from gpufleet.server.schemas.base import Body


class WorkdirOut(Body):
    digest: str  # sha256:<hex>
    size: int
    stored_at: datetime
    created: bool | None = None  # on upload: False when it was stored already
    # on upload: False when the caller held it already, so its bytes were not read; True when
    # they were read and checked (the caller holds it now)
    read: bool | None = None


class WorkdirEntryOut(Body):
    path: str
    size: int  # 0 for a link or a folder
    type: Kind
    link: str | None = None  # a link's target


class WorkdirCodeOut(Body):
    """A job's code: the snapshot its config names and its entries, in path order."""

    digest: str
    size: int
    stored_at: datetime
    total: int  # entries in the snapshot
    truncated: bool  # more than `files` holds
    files: list[WorkdirEntryOut]


class WorkdirFileOut(Body):
    """One file of a job's code: its text when it is UTF-8 text of at most 256 KiB."""

    path: str
    size: int
    status: Shown  # text, or why it is not shown
    text: str | None = None
    link: str | None = None
