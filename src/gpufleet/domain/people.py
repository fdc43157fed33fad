"""Users and teams: what their names, weights and limits may be, and which team a job is for.

docs/scheduling.md says what each is for. Pure rules; `services/people.py` applies them."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from gpufleet.domain.levels import ADMIN_USER_ID, Level
from gpufleet.domain.records import Team, User
from gpufleet.errors import Conflict, Forbidden, InvalidInput

PERSON_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# The rule in words, as the API, the CLI and the Teams page say it.
PERSON_NAME_RULE = (
    "use letters, digits, '_', '-' and '.' (at most 64 characters, starting with a letter or digit)"
)
ME = "me"  # GET /api/users/me: the caller's own user, never a user's name
MAX_WEIGHT = 1_000_000.0
MAX_LIMIT = 1_000_000  # a limit past any fleet: "no limit" is null, not a huge number


def check_name(kind: str, name: str) -> str:
    """A user's or team's name, as PERSON_NAME_RULE says; `kind` is "user" or "team"."""
    if not PERSON_NAME.fullmatch(name):
        raise InvalidInput(f"{kind} name {name[:80]!r} is not valid; {PERSON_NAME_RULE}")
    if kind == "user" and name == ME:
        raise InvalidInput(f"'{ME}' names the caller's own user in the API; choose another name")
    return name


def check_weight(weight: float) -> float:
    if isinstance(weight, bool) or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise InvalidInput(
            f"a team's weight must be a number above 0 and at most {MAX_WEIGHT:g}, "
            f"got {weight!r}; weights only compare with each other (1 and 2: twice the share)"
        )
    return float(weight)


def check_limit(field: str, value: int | None) -> int | None:
    """A limit is a whole number from 0 to MAX_LIMIT, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise InvalidInput(
            f"{field} must be a whole number from 0 to {MAX_LIMIT}, or null for no limit; "
            f"got {value!r}"
        )
    return value


def check_level_change(user: User, level: Level, caller_user_id: str) -> None:
    """The built-in admin stays an admin, and nobody lowers their own level (they would lose
    the right to undo it)."""
    if level == user.level or level == Level.ADMIN:
        return
    if user.id == ADMIN_USER_ID:
        raise Conflict(
            f"the built-in user {user.name!r} is always an admin (the first-start admin key "
            "belongs to it); create another user for a lower level"
        )
    if user.id == caller_user_id:
        raise Conflict(
            f"you are {user.name!r}, and lowering your own level would take away your right "
            "to manage users; ask another admin to do it"
        )


def check_user_deletable(user: User, caller_user_id: str) -> None:
    if user.id == ADMIN_USER_ID:
        raise Conflict(
            f"the built-in user {user.name!r} cannot be deleted: the first-start admin key "
            "belongs to it; revoke its keys instead"
        )
    if user.id == caller_user_id:
        raise Conflict(
            f"you are {user.name!r}: deleting your own user would revoke the key you are "
            "using now; delete it with another admin's key"
        )


def _names(teams: Sequence[Team]) -> str:
    return ", ".join(sorted(t.name for t in teams)) or "none"


def choose_team(user: User, teams: Sequence[Team], asked: Team | None) -> Team | None:
    """The team a job of `user` is for: the one asked (it must be one of theirs), else their
    default team, else their only team, else none. `teams` are the user's teams."""
    if asked is not None:
        if all(t.id != asked.id for t in teams):
            raise Forbidden(
                f"{user.name} is not in team {asked.name}; submit for one of their teams "
                f"({_names(teams)}) or ask an admin to add them"
            )
        return asked
    default = next((t for t in teams if t.id == user.default_team_id), None)
    if default is not None:
        return default
    return teams[0] if len(teams) == 1 else None


def no_such_team(user: User, ref: str, teams: Sequence[Team]) -> InvalidInput:
    return InvalidInput(
        f"there is no team {ref[:80]!r}; {user.name} is in: {_names(teams)} (name one of "
        "them, or leave the team out for their default)"
    )
