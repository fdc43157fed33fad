"""The bodies of the workdir snapshot routes (docs/jobs.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class WorkdirOut(BaseModel):
    digest: str  # sha256:<hex>
    size: int
    stored_at: datetime
    created: bool | None = None  # on upload: False when it was stored already
