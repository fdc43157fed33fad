"""The app's routes: built once a process, each with what every route of the app has.

FastAPI builds an included router's routes again for each app, on its first requests (each
route's dependencies analysed, a pydantic adapter made for each parameter: 0.4 s an app on a
2-core box). A test suite makes a thousand apps; a server one. The app holds the routes its
modules built (`routes.api_router`), so a new app builds none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import routing
from fastapi.routing import APIRoute

from gpufleet.server.app import create_app
from gpufleet.server.deps import bind_log_ids
from gpufleet.server.schemas.base import ERROR_RESPONSES
from gpufleet.server.settings import ServerSettings
from tests.api.conftest import Fleet


async def test_a_new_app_answers_without_building_its_routes_again(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    original = routing._populate_api_route_state

    def counting(route: Any, path: str, *args: Any, **kwargs: Any) -> None:
        built.append(path)
        original(route, path, *args, **kwargs)

    monkeypatch.setattr(routing, "_populate_api_route_state", counting)
    await fleet.restart()  # a new app, as the next test's
    agent = await fleet.create_worker("w-routes")
    assert (await agent.register()).status_code == 200
    assert (await agent.heartbeat()).status_code == 200
    for path in ("/api/queue", "/api/admin/workers", "/api/teams", "/api/audit"):
        assert (await fleet.admin.get(path)).status_code == 200, path
    assert (await fleet.http.get("/")).status_code in (200, 303)
    assert built == []


def test_every_api_route_labels_its_log_lines_and_documents_the_error_answers(
    tmp_path: Path,
) -> None:
    app = create_app(ServerSettings(data_dir=tmp_path))
    api = [r for r in app.routes if isinstance(r, APIRoute) and r.path.startswith("/api/")]
    assert len(api) > 50
    for route in api:
        assert bind_log_ids in [d.call for d in route.dependant.dependencies], route.path
        assert set(ERROR_RESPONSES) <= set(route.responses), route.path
