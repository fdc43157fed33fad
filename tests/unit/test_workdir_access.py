"""Who may name a workdir snapshot: `workdir_access.may_name` against the rule written out
again here, over every level, holding and team, and `holds` (who may skip the bytes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.levels import Level
from gpufleet.domain.ownership import Actor, Allowed, Refused
from gpufleet.domain.workdir_access import Holding, holds, may_name

USERS = st.sampled_from(["u_a", "u_b", "u_c"])
TEAMS = st.sampled_from(["t_1", "t_2", "t_3"])
HOLDINGS = st.lists(st.builds(Holding, USERS, st.none() | TEAMS), max_size=6)
ACTORS = st.builds(Actor, USERS, st.sampled_from(list(Level)), st.frozensets(TEAMS))


@given(ACTORS, HOLDINGS)
def test_only_a_holder_a_member_of_a_shared_team_or_an_admin_may_name_a_snapshot(
    actor: Actor, holdings: list[Holding]
) -> None:
    uploaded = {h.user_id for h in holdings if h.team_id is None}
    shared = {h.team_id for h in holdings if h.team_id is not None}
    expected = actor.level is Level.ADMIN or actor.user_id in uploaded or bool(shared & actor.teams)
    decision = may_name(actor, holdings)
    assert isinstance(decision, Allowed) is expected
    if isinstance(decision, Refused):
        assert "upload the folder" in decision.reason


def test_sharing_a_snapshot_with_a_team_makes_no_holder_of_the_one_who_shared_it() -> None:
    # A member of a team it is shared with may name it, and share it with another team of
    # theirs (that team may read their job's code anyway), but never skips the bytes.
    shared = [Holding("u_a"), Holding("u_b", "t_1")]
    member = Actor("u_b", Level.RESEARCHER, frozenset())
    assert isinstance(may_name(member, shared), Refused)
    assert not holds("u_b", shared) and holds("u_a", shared)
    assert not holds("u_a", [Holding("u_a", "t_1")])
