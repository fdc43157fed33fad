"""`gpufleet users` and `gpufleet teams`: who shares the fleet (needs a key with `*`).

A USER or TEAM argument is an id or a name; the orchestrator resolves it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, api_options, json_option, part
from gpufleet.domain.levels import Level
from gpufleet.domain.people import MAX_LIMIT

F = TypeVar("F", bound=Callable[..., Any])
LEVELS = [level.value for level in Level]
NONE = "none"  # a limit or default team given as `none`: cleared


class Limit(click.ParamType):  # type: ignore[type-arg]
    """A whole number from 0, or `none` for no limit."""

    name = "N|none"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        text = str(value).strip().lower()
        if text == NONE:
            return NONE
        if not text.isdigit() or int(text) > MAX_LIMIT:
            self.fail(
                f"{value!r} is not a limit; give a whole number from 0 to {MAX_LIMIT}, or "
                f"'{NONE}' for no limit",
                param,
                ctx,
            )
        return int(text)


LIMIT = Limit()
_LIMIT_WORDS = {
    "max_gpus": "GPUs in use at once",
    "max_jobs": "jobs running at once",
    "max_queued": "jobs queued at once",
}


def _limit_options(*fields: str) -> Callable[[F], F]:
    def decorate(command: F) -> F:
        for field in reversed(fields):
            flag = "--" + field.replace("_", "-")
            what = _LIMIT_WORDS[field]
            command = click.option(
                flag,
                field,
                type=LIMIT,
                help=f"At most this many {what} ('none': no limit).",
            )(command)
        return command

    return decorate


def _changes(**values: Any) -> dict[str, Any]:
    """The options given, `none` as null; those not given left out."""
    return {k: (None if v == NONE else v) for k, v in values.items() if v is not None}


def _limits(record: dict[str, Any], *fields: str) -> str:
    shown = [f"{f.removeprefix('max_')}≤{record[f]}" for f in fields if record.get(f) is not None]
    return " ".join(shown) or "-"


# ---- users ------------------------------------------------------------------------------

USER_LIMITS = ("max_gpus", "max_jobs", "max_queued")


@click.group()
def users() -> None:
    """Manage users: each API key belongs to one, and their level caps what it may do.

    Levels: admin (everything), lead (submit, approve, metrics), researcher (submit),
    viewer (submit; their jobs wait for approval by default)."""


@users.command("list")
@json_option
@api_options
def list_users(api: ApiClient, as_json: bool) -> None:
    """List users with their level, teams and keys."""
    body = api.get("/api/users")
    if as_json:
        out.print_json(body)
        return
    rows = [
        (
            u["id"],
            u["name"],
            u["level"],
            ", ".join(u["teams"]),
            u["default_team"],
            u["keys"],
            _limits(u, *USER_LIMITS),
        )
        for u in body["users"]
    ]
    out.console().print(
        out.table(("ID", "NAME", "LEVEL", "TEAMS", "DEFAULT TEAM", "KEYS", "LIMITS"), rows)
    )


def _print_user(u: dict[str, Any]) -> None:
    out.console().print(
        out.fields(
            [
                ("id", u["id"]),
                ("name", u["name"]),
                ("level", u["level"]),
                ("teams", ", ".join(u["teams"])),
                ("default team", u["default_team"]),
                ("max gpus", u["max_gpus"]),
                ("max jobs", u["max_jobs"]),
                ("max queued", u["max_queued"]),
                ("api keys", u["keys"]),
                ("service user", "yes" if u.get("service") else "no"),
                ("created", out.when(u["created_at"])),
            ]
        )
    )


@users.command("create")
@click.argument("name")
@click.option("--level", required=True, type=click.Choice(LEVELS), help="What they may do.")
@click.option("--team", help="A team to put them in; it becomes their default team.")
@click.option(
    "--service",
    is_flag=True,
    help="A service user (automation): their API keys work under --oidc-only.",
)
@_limit_options(*USER_LIMITS)
@json_option
@api_options
def create_user(
    api: ApiClient,
    name: str,
    level: str,
    team: str | None,
    service: bool,
    as_json: bool,
    **limits: Any,
) -> None:
    """Create the user NAME; then give them a key: gpufleet keys create NAME-key --user NAME."""
    body = api.post(
        "/api/users",
        {"name": name, "level": level, "team": team, "service": service, **_changes(**limits)},
    )
    if as_json:
        out.print_json(body)
        return
    out.echo(f"Created user {body['name']} ({body['id']}), level {body['level']}.")
    out.echo(
        f"Give them an API key: gpufleet keys create {body['name']}-key --user {body['name']} "
        "-p queue.read -p queue.submit"
    )


@users.command("show")
@click.argument("user")
@json_option
@api_options
def show_user(api: ApiClient, user: str, as_json: bool) -> None:
    """Show one USER: level, teams, limits and how many keys they have."""
    body = api.get(f"/api/users/{part(user)}")
    if as_json:
        out.print_json(body)
        return
    _print_user(body)


@users.command("update")
@click.argument("user")
@click.option(
    "--rename", "name", metavar="NAME", help="A new name; their keys, teams and jobs follow."
)
@click.option("--level", type=click.Choice(LEVELS), help="A new level.")
@click.option("--default-team", help="One of their teams, for jobs that name none ('none').")
@_limit_options(*USER_LIMITS)
@json_option
@api_options
def update_user(api: ApiClient, user: str, as_json: bool, **options: Any) -> None:
    """Change a USER's name, level, default team or limits; what is not given stays."""
    changes = _changes(**options)
    if not changes:
        raise click.UsageError("give something to change, e.g. --level lead or --max-gpus 4")
    body = api.patch(f"/api/users/{part(user)}", changes)
    if as_json:
        out.print_json(body)
        return
    _print_user(body)


@users.command("delete")
@click.argument("user")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def delete_user(api: ApiClient, user: str, yes: bool) -> None:
    """Delete a USER; their API keys are revoked at once."""
    found = api.get(f"/api/users/{part(user)}")
    if not yes:
        click.confirm(
            f"Delete user {found['name']} ({found['id']}) and revoke their {found['keys']} "
            "API key(s)?",
            abort=True,
            err=True,
        )
    api.delete(f"/api/users/{part(found['id'])}")
    out.echo(f"Deleted user {found['name']}; their API keys are revoked.")


# ---- teams ------------------------------------------------------------------------------

TEAM_LIMITS = ("max_gpus", "max_jobs")


@click.group()
def teams() -> None:
    """Manage teams: who shares the fleet, and with what weight and limits."""


def _team_options(command: F) -> F:
    options = [
        click.option(
            "--weight",
            type=click.FloatRange(min=0, min_open=True, max=1_000_000),
            help="Its share of the fleet against the other teams' weights (default 1).",
        ),
        _limit_options(*TEAM_LIMITS),
        click.option(
            "--preemptible/--no-preemptible",
            default=None,
            help="Its running jobs may be preempted for others.",
        ),
        click.option(
            "--can-preempt/--no-can-preempt",
            default=None,
            help="Its queued jobs may preempt others'.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@teams.command("list")
@json_option
@api_options
def list_teams(api: ApiClient, as_json: bool) -> None:
    """List teams with their weight, members, what they run and their limits."""
    body = api.get("/api/teams")
    if as_json:
        out.print_json(body)
        return
    rows = [
        (
            t["id"],
            t["name"],
            f"{t['weight']:g}",
            f"{t['running_jobs']} jobs, {t['running_gpus']} GPUs",
            _limits(t, *TEAM_LIMITS),
            _preemption(t),
            ", ".join(t["members"]),
        )
        for t in body["teams"]
    ]
    if not rows:
        out.console().print("No teams. Create one: gpufleet teams create NAME")
        return
    out.console().print(
        out.table(("ID", "NAME", "WEIGHT", "RUNNING", "LIMITS", "PREEMPTION", "MEMBERS"), rows)
    )


def _preemption(t: dict[str, Any]) -> str:
    said = ["preemptible"] if t["preemptible"] else []
    said += ["can preempt"] if t["can_preempt"] else []
    return ", ".join(said) or "-"


def _print_team(t: dict[str, Any]) -> None:
    share = t.get("share_gpus")
    factor = t.get("fair_share_factor")
    out.console().print(
        out.fields(
            [
                ("id", t["id"]),
                ("name", t["name"]),
                ("weight", f"{t['weight']:g}"),
                ("members", ", ".join(t["members"])),
                ("running", f"{t['running_jobs']} jobs, {t['running_gpus']} GPUs"),
                ("share", "-" if share is None else f"{share:.1f} GPUs"),
                ("fair-share factor", "-" if factor is None else f"{factor:.3f}"),
                ("usage", f"{t['usage'] / 3600:.1f} GPU-hours (decayed)"),
                ("max gpus", t["max_gpus"]),
                ("max jobs", t["max_jobs"]),
                ("preemption", _preemption(t)),
            ]
        )
    )


@teams.command("create")
@click.argument("name")
@_team_options
@json_option
@api_options
def create_team(api: ApiClient, name: str, as_json: bool, **options: Any) -> None:
    """Create the team NAME; add people with: gpufleet teams add NAME USER."""
    body = api.post("/api/teams", {"name": name, **_changes(**options)})
    if as_json:
        out.print_json(body)
        return
    out.echo(f"Created team {body['name']} ({body['id']}), weight {body['weight']:g}.")


@teams.command("show")
@click.argument("team")
@json_option
@api_options
def show_team(api: ApiClient, team: str, as_json: bool) -> None:
    """Show one TEAM: members, share, usage and limits."""
    body = api.get(f"/api/teams/{part(team)}")
    if as_json:
        out.print_json(body)
        return
    _print_team(body)


@teams.command("update")
@click.argument("team")
@click.option("--rename", "name", metavar="NAME", help="A new name; its members and jobs follow.")
@_team_options
@json_option
@api_options
def update_team(api: ApiClient, team: str, as_json: bool, **options: Any) -> None:
    """Change a TEAM's name, weight, limits or preemption; what is not given stays."""
    changes = _changes(**options)
    if not changes:
        raise click.UsageError("give something to change, e.g. --weight 2 or --max-gpus 8")
    body = api.patch(f"/api/teams/{part(team)}", changes)
    if as_json:
        out.print_json(body)
        return
    _print_team(body)


@teams.command("delete")
@click.argument("team")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def delete_team(api: ApiClient, team: str, yes: bool) -> None:
    """Delete a TEAM (refused while it has jobs waiting or running)."""
    if not yes:
        click.confirm(f"Delete team {team}?", abort=True, err=True)
    api.delete(f"/api/teams/{part(team)}")
    out.echo(f"Deleted team {team}.")


@teams.command("add")
@click.argument("team")
@click.argument("user")
@api_options
def add_member(api: ApiClient, team: str, user: str) -> None:
    """Put USER in TEAM."""
    body = api.put(f"/api/teams/{part(team)}/members/{part(user)}")
    out.echo(f"Team {body['name']}: {', '.join(body['members'])}.")


@teams.command("remove")
@click.argument("team")
@click.argument("user")
@api_options
def remove_member(api: ApiClient, team: str, user: str) -> None:
    """Take USER out of TEAM."""
    body = api.delete(f"/api/teams/{part(team)}/members/{part(user)}")
    out.echo(
        f"Removed {user} from team {body['name']}; members: {', '.join(body['members']) or 'none'}."
    )
