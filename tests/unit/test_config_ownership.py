"""Who may overwrite, delete and share a stored config (domain/ownership.py), as a table:
every level by every relation to the config by shared or not by every action, against the rules
as docs/security.md states them, written out here on their own."""

from __future__ import annotations

import itertools

import pytest

from gpufleet.domain.levels import Level
from gpufleet.domain.ownership import Actor, ConfigAction, ConfigOwner, may_change_config

OWNER = "u_owner"
SHARED = "t_shared"  # the team the config is shared with, when it is
OTHER = "t_other"

# The actor's relation to the config: who they are and which teams they are in.
RELATIONS = {
    "owner": (OWNER, frozenset({SHARED})),
    "owner in no team": (OWNER, frozenset()),
    "member of the shared team": ("u_member", frozenset({SHARED})),
    "member of another team": ("u_other", frozenset({OTHER})),
    "member of both teams": ("u_both", frozenset({SHARED, OTHER})),
    "stranger": ("u_stranger", frozenset()),
}
SHARE_TARGETS = [None, SHARED, OTHER]


def expected(
    level: Level, relation: str, is_shared: bool, action: ConfigAction, target: str | None
) -> bool:
    """The rules in words: admins do everything; the owner overwrites and deletes; so do the
    leads of the team it is shared with; only the owner shares, and only with a team of
    their own (or with none)."""
    user_id, teams = RELATIONS[relation]
    if level is Level.ADMIN:
        return True
    is_owner = user_id == OWNER
    if action is ConfigAction.SHARE:
        return is_owner and (target is None or target in teams)
    leads_shared_team = is_shared and level is Level.LEAD and SHARED in teams
    return is_owner or leads_shared_team


CASES = [
    (level, relation, shared, action, target)
    for level, relation, shared, action in itertools.product(
        Level, RELATIONS, (False, True), ConfigAction
    )
    for target in (SHARE_TARGETS if action is ConfigAction.SHARE else [None])
]


@pytest.mark.parametrize(("level", "relation", "is_shared", "action", "target"), CASES)
def test_who_may_change_a_stored_config(
    level: Level, relation: str, is_shared: bool, action: ConfigAction, target: str | None
) -> None:
    user_id, teams = RELATIONS[relation]
    actor = Actor(user_id=user_id, level=level, teams=teams)
    config = ConfigOwner(owner_id=OWNER, team_id=SHARED if is_shared else None)
    allowed = may_change_config(actor, config, action, share_with=target)
    assert allowed is expected(level, relation, is_shared, action, target)


def test_the_table_holds_the_cases_the_attack_needs() -> None:
    """The finding itself: a viewer, a researcher and a lead of another team may not overwrite
    admin's config; a lead of the team it is shared with may, and may not re-share it."""
    admins = ConfigOwner(owner_id="u_admin", team_id=SHARED)
    vera = Actor("u_vera", Level.VIEWER, frozenset({SHARED}))
    alice = Actor("u_alice", Level.RESEARCHER, frozenset({SHARED}))
    other_lead = Actor("u_olga", Level.LEAD, frozenset({OTHER}))
    lena = Actor("u_lena", Level.LEAD, frozenset({SHARED}))
    for actor in (vera, alice, other_lead):
        for action in (ConfigAction.OVERWRITE, ConfigAction.DELETE):
            assert not may_change_config(actor, admins, action)
    assert may_change_config(lena, admins, ConfigAction.OVERWRITE)
    assert may_change_config(lena, admins, ConfigAction.DELETE)
    assert not may_change_config(lena, admins, ConfigAction.SHARE, share_with=SHARED)
    assert len(CASES) == len(Level) * len(RELATIONS) * 2 * (2 + len(SHARE_TARGETS))
