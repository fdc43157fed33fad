"""The audit log and its chain's verification (`admin.audit`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Query

from gpufleet.domain.filters import AuditFilter
from gpufleet.domain.permissions import ADMIN_AUDIT
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.admin import AuditList, AuditOut, AuditVerification
from gpufleet.server.services import audit
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue"])
Auditor = Annotated[Principal, Depends(require(ADMIN_AUDIT))]
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000)]


@router.get("/api/audit/verify", response_model=AuditVerification)
async def verify_audit(ctx: Ctx, who: Auditor) -> AuditVerification:
    return AuditVerification.of(await audit.verify(ctx))


@router.get("/api/audit", response_model=AuditList)
async def list_audit(
    ctx: Ctx,
    who: Auditor,
    type: str | None = None,
    actor: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    user: Annotated[str | None, Query(max_length=200)] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> AuditList:
    f = AuditFilter(
        event_type=type,
        actor=actor,
        target=target,
        since=_utc(since),
        until=_utc(until),
        user=user or None,
    )
    page = await audit.list_events(ctx, f, limit, offset)
    return AuditList(
        events=[AuditOut.of(e) for e in page.events],
        total=page.total,
        limit=limit,
        offset=offset,
        actor_names=page.names,
        actor_users=page.users,
        hint=page.hint,
    )


def _utc(value: datetime | None) -> datetime | None:
    """The time in UTC (one without a zone is read as UTC); one past the ends of the
    calendar in UTC (year 1 at +01:00) is the end it overshoots."""
    if value is None or value.tzinfo is None:
        return value.replace(tzinfo=UTC) if value else None
    try:
        return value.astimezone(UTC)
    except OverflowError:
        end = datetime.min if value.year == datetime.min.year else datetime.max
        return end.replace(tzinfo=UTC)
