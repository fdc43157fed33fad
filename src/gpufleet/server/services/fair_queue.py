"""The queue in fair-share order (`domain.fair_share.rank_key`), read lazily: teams in the order
the snapshot ranks them, each team's queue as `queued_for` reads it (its head through
ix_jobs_team_queue, then only the jobs the worker's labels can match), and a team read only
once the teams ranked before it are exhausted or tie with it exactly.

A rank key with fair share on is (team part, user part, -priority, age, id). A team's jobs
come off its index in priority then age order; a job read is given out only once no job
still unread in its team could rank before it: an unread job has a user part no better
than the best any user can have, and a priority-age-id after the last one read. So the
order given out is exactly `rank_key`'s, which `domain.fair_share.next_job` also follows.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.domain.fair_share import rank_key
from gpufleet.domain.matching import fits, match_keys_for
from gpufleet.domain.policy import Candidate, Snapshot
from gpufleet.domain.records import Job, Worker
from gpufleet.server.services.standing import candidate
from gpufleet.store import Queries
from gpufleet.store.queries.jobs import TeamOf

_PAGE = 200
_HEAD = 20  # queued jobs read as they come before the index of match keys is asked
# A team's: fair share may open every team's queue in one dispatch, and a team whose head
# holds no job the worker can run should cost little before its match keys are asked.
_TEAM_HEAD = 4
Key = tuple[Any, ...]
_TEAM = slice(0, 2)  # the team's part of a rank key
_USER = slice(2, 4)  # the user's part


def _key(job: Job, snap: Snapshot) -> Key:
    return rank_key(candidate(job, snap), snap)


def _probe(team_id: str | None, user_id: str | None, snap: Snapshot) -> Key:
    """The rank key of a job of this team and user, for its team and user parts."""
    c = Candidate(
        job_id="",
        team_id=team_id,
        user_id=user_id,
        gpus=0,
        priority=0,
        created_at=snap.now,
        preemptible=False,
    )
    return rank_key(c, snap)


@dataclass
class _TeamQueue:
    """One team's queued jobs the worker could take, given out in rank order."""

    team_id: str | None
    part: Key  # the team's part of its jobs' keys
    best_user: Key  # the best user part any of its jobs can have
    unread: AsyncGenerator[Job, None]  # `queued_for` the team: priority then age
    after: tuple[int, datetime, str] | None = None
    done: bool = False
    held: list[tuple[Key, int, Job]] = field(default_factory=list)
    seen: int = 0

    def bound(self) -> Key | None:
        """No unread job of the team ranks before this; None once all are read."""
        if self.done:
            return None
        if self.after is None:
            return (*self.part, *self.best_user)
        prio, created, job_id = self.after
        return (*self.part, *self.best_user, -prio, created, job_id)

    async def head(self, snap: Snapshot) -> tuple[Key, Job] | None:
        """The team's best-ranked job not given out yet (reading on until it is known)."""
        while True:
            bound = self.bound()
            if self.held and (bound is None or self.held[0][0] <= bound):
                return self.held[0][0], self.held[0][2]
            if self.done:
                return None
            job = await anext(self.unread, None)
            if job is None:
                self.done = True
                continue
            self.seen += 1
            heapq.heappush(self.held, (_key(job, snap), self.seen, job))
            self.after = (job.priority, job.created_at, job.id)

    def pop(self) -> None:
        heapq.heappop(self.held)


async def ranked_for(
    q: Queries, worker: Worker, targets: list[str], snap: Snapshot
) -> AsyncGenerator[Job, None]:
    """Queued jobs the worker might take, in `rank_key` order.

    First the queue is asked, in its plain order, whether it holds any job the worker can
    run at all: a worker beside a deep queue of jobs it can never run then costs what it
    costs without the policy, not a read of every team's queue."""
    if not await _any_fits(q, worker, targets):
        return
    members: dict[str | None, list[str | None]] = {}
    for member_team, member in snap.member_usage:
        members.setdefault(member_team, []).append(member)
    team_ids: list[str | None] = [None, *snap.teams]
    teams = []
    try:
        for team_id in team_ids:
            part = _probe(team_id, None, snap)[_TEAM]
            # A user of no usage nor running job ranks best; a member may not, or may (ties).
            users: list[str | None] = [None, "", *members.get(team_id, [])]
            best_user = min(_probe(team_id, u, snap)[_USER] for u in users)
            unread = queued_for(q, worker, targets, TeamOf(team_id))
            teams.append(_TeamQueue(team_id, part, best_user, unread))
        teams.sort(key=lambda t: t.part)
        opened: list[_TeamQueue] = []
        waiting = list(reversed(teams))  # the next team to open last
        while True:
            heads = []
            for team in opened:
                head = await team.head(snap)
                if head is not None:
                    heads.append((head[0], team, head[1]))
            best = min(heads, key=lambda h: h[0]) if heads else None
            if waiting and (best is None or waiting[-1].part <= best[0][_TEAM]):
                opened.append(waiting.pop())
                continue
            if best is None:
                return
            _, team, job = best
            team.pop()
            yield job
    finally:
        for team in teams:
            await team.unread.aclose()


async def _any_fits(q: Queries, worker: Worker, targets: list[str]) -> bool:
    cap = worker.capacity()
    async with contextlib.aclosing(queued_for(q, worker, targets)) as plain:
        async for job in plain:
            if fits(job.requirement(), cap):
                return True
    return False


async def queued_for(
    q: Queries, worker: Worker, targets: list[str], team: TeamOf | None = None
) -> AsyncGenerator[Job, None]:
    """Queued jobs the worker might take (of one team, with `team`), in the plain dispatch
    order: priority, then age.

    The head of the queue is read as it is (one page: usually the job is there); past it,
    only jobs whose label requirement the worker's labels satisfy (`match_keys_for`, through
    an index), so queued jobs it can never run are not read one by one, however many.
    """
    keys = match_keys_for(worker.labels)
    after: tuple[int, datetime, str] | None = None
    filtered = False
    while True:
        head = _HEAD if team is None else _TEAM_HEAD
        limit = _PAGE if filtered or keys is None else head
        page = await q.queued_jobs(
            max_gpus=worker.gpu_count,
            targets=targets,
            after=after,
            limit=limit,
            match_keys=keys if filtered else None,
            team=team,
        )
        for job in page:
            yield job
        if len(page) < limit:
            return
        last = page[-1]
        after = (last.priority, last.created_at, last.id)
        filtered = keys is not None
