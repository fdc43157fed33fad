"""Who may name a workdir snapshot (docs/security.md, "A job's code"): decided here, applied
by `server/services/workdirs.py` at upload, at a submit and when a digest is asked about.

A snapshot is named by the sha256 of its archive, and every job's config shows it: knowing a
digest proves nothing. So a snapshot has holders: the users who uploaded its bytes (checked
against the digest), and the teams they shared it with (a job of theirs naming it is for that
team). Only a holder, a member of a team it is shared with, or an admin may name it in a job
or learn that it is stored; anyone else uploads the folder, which makes them a holder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.domain.levels import Level
from gpufleet.domain.ownership import Actor, Allowed, Decision, Refused


@dataclass(frozen=True, slots=True)
class Holding:
    """One row of a snapshot's holders: `user_id` uploaded its bytes (`team_id` None), or
    shared it with `team_id` by naming it in a job for that team."""

    user_id: str
    team_id: str | None = None


def holds(user_id: str, holdings: Iterable[Holding]) -> bool:
    """Whether user `user_id` uploaded the snapshot's bytes (so may skip sending them)."""
    return any(h.team_id is None and h.user_id == user_id for h in holdings)


def may_name(actor: Actor, holdings: Iterable[Holding]) -> Decision:
    """Whether `actor` may name the snapshot in a job, or be told that it is stored: an admin,
    a holder, a member of a team a holder shared it with."""
    held = list(holdings)
    if actor.level is Level.ADMIN or holds(actor.user_id, held):
        return Allowed()
    if any(h.team_id is not None and h.team_id in actor.teams for h in held):
        return Allowed()
    return Refused(
        "only those who uploaded its files, the teams they shared it with and admins may; "
        "upload the folder (`gpufleet run` does) and submit again"
    )
