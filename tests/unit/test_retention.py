"""The retention rules (domain/retention.py): what a sweep deletes, and what it never does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.retention import (
    JobFacts,
    Plan,
    Policy,
    StagedObject,
    expired,
    plan,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Art:
    id: str
    job_id: str
    attempt_id: str
    kind: str = "artifact"
    checkpoint: str | None = None


@dataclass(frozen=True)
class Ck:
    id: str
    job_id: str
    attempt_id: str
    name: str
    created_at: datetime


def checkpoint_with_files(job: str, attempt: str, step: int, age_days: float) -> tuple[Ck, Art]:
    name = f"checkpoint-{step}"
    ck = Ck(f"k_{job}_{step}", job, attempt, name, NOW - timedelta(days=age_days))
    return ck, Art(f"r_{job}_{step}", job, attempt, "checkpoint", name)


def test_a_job_ended_longer_ago_than_the_period_loses_everything() -> None:
    old = JobFacts("j_old", ended_at=NOW - 31 * DAY)
    ck, ck_file = checkpoint_with_files("j_old", "a1", 100, 40)
    model = Art("r_model", "j_old", "a1")
    decided = plan(NOW, Policy.of(30, 3), [old], [model, ck_file], [ck])
    assert decided.artifact_ids == {"r_model", ck_file.id}
    assert decided.checkpoint_ids == {ck.id}
    assert decided.expired_jobs == {"j_old"}
    assert decided.by_job == {"j_old": frozenset({"r_model", ck_file.id})}


def test_a_job_inside_the_period_a_running_one_and_a_pinned_one_keep_their_files() -> None:
    recent = JobFacts("j_recent", ended_at=NOW - 29 * DAY)
    running = JobFacts("j_running", ended_at=None)
    pinned = JobFacts("j_pinned", ended_at=NOW - 400 * DAY, pinned=True)
    files = [Art(f"r_{j.id}", j.id, "a1") for j in (recent, running, pinned)]
    assert plan(NOW, Policy.of(30, 3), [recent, running, pinned], files, []).empty


def test_zero_days_keeps_everything_forever() -> None:
    ancient = JobFacts("j", ended_at=NOW - 10_000 * DAY)
    assert plan(NOW, Policy.of(0, 3), [ancient], [Art("r", "j", "a")], []).empty
    assert not expired(ancient, NOW, Policy.of(0, 3))


def test_only_the_newest_checkpoints_are_kept_with_their_files() -> None:
    job = JobFacts("j", ended_at=None)
    pairs = [checkpoint_with_files("j", "a1", step, 10 - step / 100) for step in (100, 200, 300)]
    pairs += [checkpoint_with_files("j", "a2", step, 10 - step / 100) for step in (400, 500)]
    model = Art("r_model", "j", "a2")
    decided = plan(
        NOW, Policy.of(30, 3), [job], [model, *(a for _, a in pairs)], [c for c, _ in pairs]
    )
    assert decided.checkpoint_ids == {"k_j_100", "k_j_200"}
    assert decided.artifact_ids == {"r_j_100", "r_j_200"}
    assert not decided.expired_jobs


def test_the_checkpoint_an_active_attempt_resumed_from_is_never_pruned() -> None:
    job = JobFacts("j", ended_at=None, resumed_from=frozenset({"k_j_100"}))
    pairs = [checkpoint_with_files("j", "a1", step, 10 - step / 100) for step in (100, 200, 300)]
    decided = plan(NOW, Policy.of(30, 1), [job], [a for _, a in pairs], [c for c, _ in pairs])
    assert decided.checkpoint_ids == {"k_j_200"}
    assert decided.artifact_ids == {"r_j_200"}


def test_a_pruned_checkpoint_takes_only_its_own_attempts_files() -> None:
    """Two attempts both wrote a checkpoint-100: pruning one leaves the other's files."""
    job = JobFacts("j", ended_at=None)
    old = Ck("k_old", "j", "a1", "checkpoint-100", NOW - 3 * DAY)
    new = Ck("k_new", "j", "a2", "checkpoint-100", NOW - DAY)
    files = [
        Art("r_a1", "j", "a1", "checkpoint", "checkpoint-100"),
        Art("r_a2", "j", "a2", "checkpoint", "checkpoint-100"),
        Art("r_plain", "j", "a1", "artifact", None),
    ]
    decided = plan(NOW, Policy.of(30, 1), [job], files, [old, new])
    assert decided.artifact_ids == {"r_a1"}
    assert decided.checkpoint_ids == {"k_old"}


def test_zero_checkpoints_kept_means_every_checkpoint_is_kept() -> None:
    job = JobFacts("j", ended_at=None)
    pairs = [checkpoint_with_files("j", "a1", step, 5) for step in (1, 2, 3, 4)]
    assert plan(NOW, Policy.of(30, 0), [job], [a for _, a in pairs], [c for c, _ in pairs]).empty


def test_a_pinned_job_keeps_even_its_old_checkpoints() -> None:
    job = JobFacts("j", ended_at=None, pinned=True)
    pairs = [checkpoint_with_files("j", "a1", step, 5 - step) for step in (1, 2, 3, 4)]
    assert plan(NOW, Policy.of(30, 1), [job], [a for _, a in pairs], [c for c, _ in pairs]).empty


def test_jobs_not_named_are_left_alone() -> None:
    ck, art = checkpoint_with_files("j_other", "a", 1, 100)
    assert plan(NOW, Policy.of(1, 1), [], [art], [ck]).empty


def test_staged_uploads_go_after_a_day() -> None:
    staged = [
        StagedObject("incoming/fresh", NOW - timedelta(hours=23)),
        StagedObject("incoming/stale", NOW - timedelta(hours=25)),
    ]
    assert plan(NOW, Policy.of(30, 3), [], [], [], staged).staged_keys == ("incoming/stale",)


# ---- properties ---------------------------------------------------------------------------

JOBS = ["j1", "j2", "j3"]
ATTEMPTS = ["a1", "a2"]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Policy, list[JobFacts], list[Art], list[Ck]]:
    policy = Policy.of(draw(st.integers(0, 60)), draw(st.integers(0, 4)))
    checkpoints = []
    for i in range(draw(st.integers(0, 12))):
        job, attempt = draw(st.sampled_from(JOBS)), draw(st.sampled_from(ATTEMPTS))
        age = timedelta(hours=draw(st.integers(0, 24 * 90)))
        checkpoints.append(Ck(f"k{i}", job, attempt, f"checkpoint-{i}", NOW - age))
    files = [Art(f"f{c.id}", c.job_id, c.attempt_id, "checkpoint", c.name) for c in checkpoints]
    files += [Art(f"m{j}", j, "a1") for j in JOBS if draw(st.booleans())]
    ids = [c.id for c in checkpoints]
    jobs = []
    for job in JOBS:
        ended = draw(st.none() | st.integers(0, 24 * 90).map(lambda h: NOW - timedelta(hours=h)))
        resumed = draw(st.frozensets(st.sampled_from(ids))) if ids else frozenset()
        jobs.append(JobFacts(job, ended, draw(st.booleans()), resumed))
    return policy, jobs, files, checkpoints


@given(worlds())
def test_nothing_pinned_running_resumed_from_or_among_the_newest_is_ever_deleted(
    world: tuple[Policy, list[JobFacts], list[Art], list[Ck]],
) -> None:
    policy, jobs, files, checkpoints = world
    decided: Plan = plan(NOW, policy, jobs, files, checkpoints)
    facts = {j.id: j for j in jobs}
    for art in files:
        job = facts[art.job_id]
        if art.id in decided.artifact_ids and (job.pinned or job.ended_at is None):
            # only checkpoint pruning touches a live or pinned job, and never a pinned one
            assert not job.pinned and art.kind == "checkpoint"
    for job in jobs:
        held = sorted(
            (c for c in checkpoints if c.job_id == job.id),
            key=lambda c: (c.created_at, c.id),
            reverse=True,
        )
        if job.id in decided.expired_jobs:
            assert all(c.id in decided.checkpoint_ids for c in held)
            continue
        kept = held if policy.keep_checkpoints == 0 else held[: policy.keep_checkpoints]
        for ck in kept:
            assert ck.id not in decided.checkpoint_ids
        for ck in held:
            if ck.id in job.resumed_from or job.pinned:
                assert ck.id not in decided.checkpoint_ids


@given(worlds())
def test_a_checkpoints_files_go_exactly_when_it_goes_or_its_job_expires(
    world: tuple[Policy, list[JobFacts], list[Art], list[Ck]],
) -> None:
    policy, jobs, files, checkpoints = world
    decided = plan(NOW, policy, jobs, files, checkpoints)
    by_file = {f"f{c.id}": c for c in checkpoints}
    for art in files:
        if art.id in by_file:
            ck = by_file[art.id]
            assert (art.id in decided.artifact_ids) == (ck.id in decided.checkpoint_ids)
        else:
            assert (art.id in decided.artifact_ids) == (art.job_id in decided.expired_jobs)


def test_a_gangs_newest_complete_checkpoint_outlasts_newer_incomplete_ones() -> None:
    """Newer checkpoints some node never finished count towards the newest N, but the
    newest one every node completed (the one a resume needs) is kept beside them."""
    gang = JobFacts("j_gang", ended_at=None, nodes=2)
    made = [checkpoint_with_files("j_gang", "a1", step, 10 - step) for step in range(5)]
    parts = {made[0][0].id: {0, 1}, made[1][0].id: {0, 1}}  # then 2, 3, 4: only node 0's
    parts |= {ck.id: {0} for ck, _ in made[2:]}
    decided = plan(
        NOW, Policy.of(0, 2), [gang], [f for _, f in made], [c for c, _ in made], (), parts
    )
    newest_complete = made[1][0]
    assert newest_complete.id not in decided.checkpoint_ids
    assert decided.checkpoint_ids == {made[0][0].id, made[2][0].id}  # 4 and 3 are the newest 2
    assert made[1][1].id not in decided.artifact_ids


def test_a_one_node_job_knows_no_complete_checkpoint_to_spare() -> None:
    solo = JobFacts("j_solo", ended_at=None)
    made = [checkpoint_with_files("j_solo", "a1", step, 10 - step) for step in range(3)]
    decided = plan(NOW, Policy.of(0, 1), [solo], [f for _, f in made], [c for c, _ in made])
    assert decided.checkpoint_ids == {made[0][0].id, made[1][0].id}


@given(worlds(), st.integers(2, 3), st.data())
def test_a_gangs_newest_complete_checkpoint_is_never_pruned(
    world: tuple[Policy, list[JobFacts], list[Art], list[Ck]], nodes: int, data: st.DataObject
) -> None:
    policy, jobs, files, checkpoints = world
    gangs = [JobFacts(j.id, j.ended_at, j.pinned, j.resumed_from, nodes) for j in jobs]
    ranks = st.frozensets(st.integers(0, nodes - 1))
    parts = {c.id: data.draw(ranks) for c in checkpoints}
    decided = plan(NOW, policy, gangs, files, checkpoints, (), parts)
    for job in gangs:
        if job.id in decided.expired_jobs:
            continue
        held = sorted(
            (c for c in checkpoints if c.job_id == job.id),
            key=lambda c: (c.created_at, c.id),
            reverse=True,
        )
        whole = [c for c in held if len(parts[c.id]) == nodes]
        if whole:
            assert whole[0].id not in decided.checkpoint_ids
        if policy.keep_checkpoints and not job.pinned:  # no more than N and the complete one
            kept = [c for c in held if c.id not in decided.checkpoint_ids]
            extra = {c.id for c in kept} - set(job.resumed_from) - {c.id for c in whole[:1]}
            assert len(extra) <= policy.keep_checkpoints
