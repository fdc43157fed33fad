"""The bodies of the workdir snapshot routes (docs/jobs.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from gpufleet.artifacts.workdir_listing import Kind, Shown


class WorkdirOut(BaseModel):
    digest: str  # sha256:<hex>
    size: int
    stored_at: datetime
    created: bool | None = None  # on upload: False when it was stored already
    # on upload: False when the caller held it already, so its bytes were not read; True when
    # they were read and checked (the caller holds it now)
    read: bool | None = None


class WorkdirEntryOut(BaseModel):
    path: str
    size: int  # 0 for a link or a folder
    type: Kind
    link: str | None = None  # a link's target


class WorkdirCodeOut(BaseModel):
    """A job's code: the snapshot its config names and its entries, in path order."""

    digest: str
    size: int
    stored_at: datetime
    total: int  # entries in the snapshot
    truncated: bool  # more than `files` holds
    files: list[WorkdirEntryOut]


class WorkdirFileOut(BaseModel):
    """One file of a job's code: its text when it is UTF-8 text of at most 256 KiB."""

    path: str
    size: int
    status: Shown  # text, or why it is not shown
    text: str | None = None
    link: str | None = None
