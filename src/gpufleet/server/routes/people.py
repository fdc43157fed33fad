"""Users and teams (`*` to manage them; `queue.read` to see the teams; any key sees itself)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Query

from gpufleet.domain.permissions import ALL, QUEUE_READ
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.people import (
    CreateTeam,
    CreateUser,
    SampleOut,
    TeamList,
    TeamOut,
    TeamUsage,
    UpdateTeam,
    UpdateUser,
    UserList,
    UserOut,
)
from gpufleet.server.services import people
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api", tags=["people"])
Root = Annotated[Principal, Depends(require(ALL))]
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Anyone = Annotated[Principal, Depends(require(None))]


@router.get("/users", response_model=UserList)
async def list_users(ctx: Ctx, who: Root) -> UserList:
    return UserList(users=[UserOut.of_view(v) for v in await people.list_users(ctx)])


@router.post("/users", response_model=UserOut, status_code=201)
async def create_user(ctx: Ctx, who: Root, client: Client, body: CreateUser) -> UserOut:
    limits = body.model_dump(include={"max_gpus", "max_jobs", "max_queued"})
    view = await people.create_user(
        ctx, body.name, body.level, body.team, limits, who.actor, client, service=body.service
    )
    return UserOut.of_view(view)


@router.get("/users/me", response_model=UserOut)
async def me(ctx: Ctx, who: Anyone) -> UserOut:
    """The user the calling key belongs to."""
    return UserOut.of_view(await people.get_user(ctx, who.user.id))


@router.get("/users/{user}", response_model=UserOut)
async def get_user(ctx: Ctx, who: Root, user: str) -> UserOut:
    return UserOut.of_view(await people.get_user(ctx, user))


@router.patch("/users/{user}", response_model=UserOut)
async def update_user(ctx: Ctx, who: Root, client: Client, user: str, body: UpdateUser) -> UserOut:
    changes = body.model_dump(exclude_unset=True)
    view = await people.update_user(ctx, user, changes, who.actor, who.user.id, client)
    return UserOut.of_view(view)


@router.delete("/users/{user}", response_model=Ok)
async def delete_user(ctx: Ctx, who: Root, client: Client, user: str) -> Ok:
    """Delete the user and revoke their API keys."""
    await people.delete_user(ctx, user, who.actor, who.user.id, client)
    return Ok()


@router.get("/teams", response_model=TeamList)
async def list_teams(ctx: Ctx, who: Reader) -> TeamList:
    return TeamList(teams=[TeamOut.of_view(v) for v in await people.list_teams(ctx)])


@router.post("/teams", response_model=TeamOut, status_code=201)
async def create_team(ctx: Ctx, who: Root, client: Client, body: CreateTeam) -> TeamOut:
    settings = body.model_dump(exclude={"name"})
    return TeamOut.of_view(await people.create_team(ctx, body.name, settings, who.actor, client))


@router.get("/teams/{team}", response_model=TeamOut)
async def get_team(ctx: Ctx, who: Reader, team: str) -> TeamOut:
    return TeamOut.of_view(await people.get_team(ctx, team))


@router.patch("/teams/{team}", response_model=TeamOut)
async def update_team(ctx: Ctx, who: Root, client: Client, team: str, body: UpdateTeam) -> TeamOut:
    changes = body.model_dump(exclude_unset=True)
    return TeamOut.of_view(await people.update_team(ctx, team, changes, who.actor, client))


@router.delete("/teams/{team}", response_model=Ok)
async def delete_team(ctx: Ctx, who: Root, client: Client, team: str) -> Ok:
    """Refused while the team has jobs waiting or running."""
    await people.delete_team(ctx, team, who.actor, client)
    return Ok()


@router.put("/teams/{team}/members/{user}", response_model=TeamOut)
async def add_member(ctx: Ctx, who: Root, client: Client, team: str, user: str) -> TeamOut:
    return TeamOut.of_view(await people.add_member(ctx, team, user, who.actor, client))


@router.delete("/teams/{team}/members/{user}", response_model=TeamOut)
async def remove_member(ctx: Ctx, who: Root, client: Client, team: str, user: str) -> TeamOut:
    return TeamOut.of_view(await people.remove_member(ctx, team, user, who.actor, client))


@router.get("/teams/{team}/usage", response_model=TeamUsage)
async def team_usage(
    ctx: Ctx, who: Reader, team: str, since: Annotated[datetime | None, Query()] = None
) -> TeamUsage:
    """Running GPUs and decayed usage over time (default: the last day)."""
    samples = await people.team_usage(ctx, team, since)
    return TeamUsage(samples=[SampleOut.of_sample(s) for s in samples])
