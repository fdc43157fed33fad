"""Liveness and readiness for load balancers (open: they reveal nothing), and metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import JSONResponse, Response

from gpufleet.domain.permissions import METRICS_READ
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.services import ops
from gpufleet.server.services.auth import Principal

router = api_router(tags=["ops"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive and serving."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready: the database"}})
async def readyz(ctx: Ctx) -> JSONResponse:
    """The database answers and its schema is current."""
    ok, why = await ops.ready(ctx)
    return JSONResponse(
        {"status": "ready" if ok else "not ready", "detail": why}, status_code=200 if ok else 503
    )


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
async def metrics(ctx: Ctx, who: Annotated[Principal, Depends(require(METRICS_READ))]) -> Response:
    """Prometheus text format (permission `metrics.read`)."""
    return Response(await ops.metrics(ctx), media_type=CONTENT_TYPE_LATEST)
