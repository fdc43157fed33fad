"""Dispatch applies the queue policy exactly as the domain states it (#18), on both databases.

Hypothesis draws small states (teams with weights and usage, members with theirs, limits,
jobs running and queued) and a freed worker; the job dispatch offers that worker is the one
`domain.fair_share.next_job` names on the same state, and starting it exceeds no limit.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpufleet.domain.fair_share import next_job
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.policy import Candidate
from gpufleet.domain.states import JobStatus, RetryOn, Target
from gpufleet.server.services import dispatch
from gpufleet.server.services.standing import candidate, snapshot
from gpufleet.store.queries import NewJob
from gpufleet.store.tables import jobs, queue_policy, team_members, teams, users, workers
from tests.api.conftest import Agent, Fleet, both_databases

TEAMS = ["t_a", "t_b", "t_c"]
USERS = ["u_1", "u_2", "u_3"]
small = st.one_of(st.none(), st.integers(0, 4))

NO_LIMITS: dict[str, Any] = {
    "max_jobs": None,
    "max_gpus": None,
    "team_max_jobs": None,
    "team_max_gpus": None,
    "user_max_jobs": None,
    "user_max_gpus": None,
}
policies = st.fixed_dictionaries(
    {
        "fair_share": st.booleans(),
        "max_jobs": small,
        "max_gpus": small,
        "team_max_jobs": small,
        "team_max_gpus": small,
        "user_max_jobs": small,
        "user_max_gpus": small,
    }
)
team_rows = st.lists(
    st.tuples(st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.0, 100.0, 5000.0]), small),
    min_size=3,
    max_size=3,
)
memberships = st.lists(
    st.tuples(st.sampled_from(TEAMS), st.sampled_from(USERS), st.sampled_from([0.0, 50.0])),
    max_size=6,
    unique_by=lambda m: (m[0], m[1]),
)
job_rows = st.lists(
    st.tuples(
        st.sampled_from([*TEAMS, None]),
        st.sampled_from(USERS),
        st.integers(0, 3),  # GPUs
        st.sampled_from([0, 10, 20]),  # priority
        st.integers(0, 5),  # age, in minutes
        st.booleans(),  # running (else queued)
    ),
    min_size=1,
    max_size=10,
)


async def _scene(fleet: Fleet) -> Agent:
    agent: Agent | None = getattr(fleet, "freed", None)
    if agent is None:
        agent = await fleet.online_worker("freed", gpu_count=4)
        fleet.freed = agent  # type: ignore[attr-defined]  # one worker for every example
    return agent


async def _write_state(
    fleet: Fleet,
    worker_id: str,
    worker_gpus: int,
    policy: dict[str, Any],
    team_list: list[tuple[float, float, int | None]],
    members: list[tuple[str, str, float]],
    job_list: list[tuple[str | None, str, int, int, int, bool]],
) -> None:
    now = fleet.clock.now
    async with fleet.ctx.store.engine.begin() as conn:
        for table in (jobs, team_members, teams):
            await conn.execute(sa.delete(table))
        await conn.execute(sa.delete(users).where(users.c.id.in_(USERS)))
        await conn.execute(sa.update(queue_policy).values(**policy))
        await conn.execute(
            sa.update(workers)
            .where(workers.c.id == worker_id)
            .values(
                gpu_count=worker_gpus, status="idle", current_job_id=None, current_attempt_id=None
            )
        )
        for team_id, (weight, usage, max_gpus) in zip(TEAMS, team_list, strict=True):
            await conn.execute(
                sa.insert(teams).values(
                    id=team_id,
                    name=team_id,
                    weight=weight,
                    usage=usage,
                    max_gpus=max_gpus,
                    created_at=now,
                )
            )
        for user_id in USERS:
            await conn.execute(
                sa.insert(users).values(id=user_id, name=user_id, level="lead", created_at=now)
            )
        for team_id, user_id, usage in members:
            await conn.execute(
                sa.insert(team_members).values(team_id=team_id, user_id=user_id, usage=usage)
            )
        for n, (team_id, user_id, gpus, priority, age, running) in enumerate(job_list):
            row = NewJob(
                id=f"j_{n:02d}",
                config={"command": ["x"]},
                target=Target.WORKER,
                worker_labels={},
                gpu_count=gpus,
                priority=priority,
                max_retries=0,
                retry_on=frozenset({RetryOn.LOST}),
                submitted_by="test",
                created_at=now - timedelta(minutes=age),
                user_id=user_id,
                team_id=team_id,
                status=JobStatus.RUNNING if running else JobStatus.QUEUED,
            ).row()
            await conn.execute(sa.insert(jobs).values(**row))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    policy=policies,
    team_list=team_rows,
    members=memberships,
    job_list=job_rows,
    worker_gpus=st.integers(1, 4),
)
# Fair share over priority and age: between teams, then between a team's members.
@example(
    policy={**NO_LIMITS, "fair_share": True},
    team_list=[(1.0, 5000.0, None), (1.0, 0.0, None), (1.0, 0.0, None)],
    members=[],
    job_list=[("t_a", "u_1", 1, 20, 5, False), ("t_b", "u_2", 1, 0, 0, False)],
    worker_gpus=1,
)
@example(
    policy={**NO_LIMITS, "fair_share": True},
    team_list=[(1.0, 0.0, None), (1.0, 0.0, None), (1.0, 0.0, None)],
    members=[("t_a", "u_1", 50.0), ("t_a", "u_2", 0.0)],
    job_list=[("t_a", "u_1", 1, 20, 5, False), ("t_a", "u_2", 1, 0, 0, False)],
    worker_gpus=1,
)
async def test_a_freed_worker_is_offered_the_job_the_policy_names_and_no_limit_is_passed(
    fleet: Fleet,
    policy: dict[str, Any],
    team_list: list[tuple[float, float, int | None]],
    members: list[tuple[str, str, float]],
    job_list: list[tuple[str | None, str, int, int, int, bool]],
    worker_gpus: int,
) -> None:
    agent = await _scene(fleet)
    await _write_state(fleet, agent.id, worker_gpus, policy, team_list, members, job_list)
    async with fleet.ctx.store.read() as q:
        snap = await snapshot(q, fleet.clock.now)
        queued = await q.all_queued(100)
    expected: Candidate | None = next_job(worker_gpus, [candidate(j, snap) for j in queued], snap)

    await dispatch.dispatch_worker(fleet.ctx, agent.id)

    async with fleet.ctx.store.read() as q:
        after = [await q.get_job(j.id) for j in queued]
    offered = [j for j in after if j is not None and j.status is JobStatus.OFFERED]
    assert [j.id for j in offered] == ([expected.job_id] if expected else [])
    for job in offered:
        assert limit_hit(candidate(job, snap), snap) is None


@both_databases
async def test_dispatches_racing_for_many_workers_never_pass_a_limit_together(
    fleet: Fleet,
) -> None:
    # On PostgreSQL each dispatch is its own connection: without the policy row's lock they
    # would all count nothing running and all claim.
    # Each worker has its own lane and job: no claim loses to another on the same job.
    agents = [await fleet.online_worker(f"gpu-{n}", labels={"lane": str(n)}) for n in range(4)]
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(sa.update(queue_policy).values(max_jobs=1, max_gpus=None))
        await conn.execute(sa.update(workers).values(status="idle"))
        for n in range(4):
            row = NewJob(
                id=f"j_race{n}",
                config={"command": ["x"]},
                target=Target.WORKER,
                worker_labels={"lane": str(n)},
                gpu_count=1,
                priority=0,
                max_retries=0,
                retry_on=frozenset({RetryOn.LOST}),
                submitted_by="test",
                created_at=fleet.clock.now,
            ).row()
            await conn.execute(sa.insert(jobs).values(**row))

    await asyncio.gather(*(dispatch._offer_to(fleet.ctx, a.id) for a in agents))

    listed = (await fleet.admin.get("/api/queue", params={"status": "offered"})).json()
    assert listed["total"] == 1
