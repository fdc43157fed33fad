"""Who may act on what a user owns: jobs and stored configs (#31).

Reads stay open to `queue.read` (a shared fleet is visible); these rules decide the writes,
after the key's permissions (`permissions.py`) have let the request in. Services ask, the
domain decides: nothing here reads the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.levels import Level


@dataclass(frozen=True, slots=True)
class Actor:
    user_id: str
    level: Level
    teams: frozenset[str]  # ids of the teams the user is a member of
    # a "lead of team T" is level == Level.LEAD and T in teams; admins (Level.ADMIN) may do
    # everything


# ---- stored configs -----------------------------------------------------------------------


class ConfigAction(StrEnum):
    OVERWRITE = "overwrite"  # PUT over a stored config's body (a new version)
    DELETE = "delete"  # the config and its versions
    SHARE = "share"  # set or clear the team it is shared with


@dataclass(frozen=True, slots=True)
class ConfigOwner:
    """Whose a stored config is: its creator, and the team it is shared with (None: none)."""

    owner_id: str
    team_id: str | None


def may_change_config(
    actor: Actor, config: ConfigOwner, action: ConfigAction, *, share_with: str | None = None
) -> bool:
    """Whether `actor` may take `action` on the stored config.

    Admins may do everything. Overwrite and delete: the owner, and the leads of the team it
    is shared with. Share (`share_with`: the team asked for, None to share with none): the
    owner, only with a team they are in; a lead of the shared team may change the config
    but not move it to another team."""
    if actor.level is Level.ADMIN:
        return True
    owner = actor.user_id == config.owner_id
    if action is ConfigAction.SHARE:
        return owner and (share_with is None or share_with in actor.teams)
    lead_of_team = (
        config.team_id is not None and actor.level is Level.LEAD and config.team_id in actor.teams
    )
    return owner or lead_of_team
