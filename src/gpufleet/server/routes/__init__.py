"""Thin routes: parse, call one service, map the result."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from gpufleet.server.deps import bind_log_ids
from gpufleet.server.jsonbody import JsonBodyRoute
from gpufleet.server.schemas.base import ERROR_RESPONSES


def api_router(**options: Any) -> APIRouter:
    """Every router of the app is made here, with what every route of the app has: JSON
    bodies read alike (`JsonBodyRoute`), the request's log lines labelled with the job or
    worker its path names (`bind_log_ids`), the error answers in the OpenAPI document.

    Each route is built once a process, when its module is imported, and the app holds the
    routes as built (`create_app`): FastAPI builds an included router's routes again for
    each app, on its first requests, about 0.4 s an app on this box, and every test's app
    paid it."""
    options.setdefault("route_class", JsonBodyRoute)
    return APIRouter(dependencies=[Depends(bind_log_ids)], responses=ERROR_RESPONSES, **options)
