"""The queue policy: limits, ranking, fair share, preemption, approvals and priorities."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.approvals import approval_needed
from gpufleet.domain.fair_share import (
    accrue,
    decay,
    fair_share_factor,
    next_job,
    rank_key,
    share_gpus,
)
from gpufleet.domain.limits import LimitCode, LimitHit, limit_hit, queued_limit_hit
from gpufleet.domain.policy import (
    LEVEL_PRIORITY,
    Candidate,
    Level,
    Limits,
    Policy,
    Running,
    Snapshot,
    Tally,
    TeamState,
    UserState,
    check_priority,
)
from gpufleet.domain.preemption import as_candidate, choose_victim, may_preempt
from gpufleet.errors import Forbidden

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = 3600.0
TEAM_IDS: list[str | None] = ["t_nlp", "t_cv", "t_rl", None]
USER_IDS = ["u_ann", "u_bob", "u_cy", "u_dee"]


def tallies(running: Iterable[Running]) -> dict[str, dict]:
    """What runs, counted per scope as the store would count it."""
    out: dict[str, dict] = {"fleet": {None: Tally()}, "team": {}, "user": {}, "member": {}}
    for r in running:
        keys = {"fleet": None, "team": r.team_id}
        if r.user_id is not None:
            keys |= {"user": r.user_id, "member": (r.team_id, r.user_id)}
        for scope, key in keys.items():
            t = out[scope].get(key, Tally())
            out[scope][key] = Tally(t.jobs + 1, t.gpus + r.gpus)
    return out


def snapshot(policy: Policy, running: Sequence[Running] = (), **fields) -> Snapshot:
    t = tallies(running)
    fields.setdefault("now", T0)
    return Snapshot(
        policy=policy,
        fleet=t["fleet"][None],
        by_team=t["team"],
        by_user=t["user"],
        by_member=t["member"],
        **fields,
    )


def job(n: int, team: str | None = "t_nlp", user: str | None = "u_ann", **fields) -> Candidate:
    values = {"gpus": 1, "priority": 10, "created_at": T0 + timedelta(seconds=n)}
    values.update(fields)
    return Candidate(f"j_{n:04d}", team, user, **values)


def running(n: int, team: str | None = "t_nlp", user: str | None = "u_ann", **fields) -> Running:
    values = {"gpus": 1, "priority": 10, "started_at": T0 - timedelta(hours=1)}
    values.update(fields)
    return Running(f"j_{n:04d}", f"a_{n:04d}", f"w_{n:04d}", team, user, **values)


# ---- limits are never exceeded --------------------------------------------------------------

small_limit = st.none() | st.integers(min_value=1, max_value=8)
limits_st = st.builds(
    Limits,
    max_jobs=small_limit,
    max_gpus=small_limit,
    team_max_jobs=small_limit,
    team_max_gpus=small_limit,
    user_max_jobs=small_limit,
    user_max_gpus=small_limit,
)
teams_st = st.tuples(*[st.tuples(small_limit, small_limit) for _ in TEAM_IDS[:-1]]).map(
    lambda own: {
        tid: TeamState(tid, tid.removeprefix("t_"), max_gpus=g, max_jobs=j)
        for tid, (g, j) in zip(TEAM_IDS, own, strict=False)
        if tid is not None
    }
)
users_st = st.tuples(*[st.tuples(small_limit, small_limit) for _ in USER_IDS]).map(
    lambda own: {
        uid: UserState(uid, uid.removeprefix("u_"), Level.RESEARCHER, max_gpus=g, max_jobs=j)
        for uid, (g, j) in zip(USER_IDS, own, strict=True)
    }
)
steps_st = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from(TEAM_IDS),
            st.sampled_from([*USER_IDS, None]),
            st.integers(1, 8),
            st.integers(0, 30),
        ),
        st.tuples(st.just("dispatch"), st.integers(0, 5)),
        st.tuples(st.just("finish"), st.integers(0, 20)),
    ),
    max_size=60,
)


def effective(own: int | None, default: int | None) -> int | None:
    return own if own is not None else default


def assert_within_limits(
    run: Iterable[Running], lim: Limits, teams: dict, users: dict[str, UserState]
) -> None:
    t = tallies(run)
    scopes = [(t["fleet"][None], lim.max_jobs, lim.max_gpus)]
    for tid, tally in t["team"].items():
        team = teams.get(tid)
        own_jobs, own_gpus = (team.max_jobs, team.max_gpus) if team else (None, None)
        scopes.append(
            (tally, effective(own_jobs, lim.team_max_jobs), effective(own_gpus, lim.team_max_gpus))
        )
    for uid, tally in t["user"].items():
        user = users[uid]
        scopes.append(
            (
                tally,
                effective(user.max_jobs, lim.user_max_jobs),
                effective(user.max_gpus, lim.user_max_gpus),
            )
        )
    for tally, max_jobs, max_gpus in scopes:
        assert max_jobs is None or tally.jobs <= max_jobs
        assert max_gpus is None or tally.gpus <= max_gpus


@settings(max_examples=150, deadline=None)
@given(
    lim=limits_st,
    teams=teams_st,
    users=users_st,
    workers=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    fair_share=st.booleans(),
    steps=steps_st,
)
def test_starting_jobs_only_through_next_job_never_passes_a_limit(
    lim, teams, users, workers, fair_share, steps
):
    policy = Policy(limits=lim, fair_share=fair_share)
    queued: list[Candidate] = []
    busy: dict[int, Running] = {}
    for n, step in enumerate(steps):
        if step[0] == "submit":
            _, team, user, gpus, priority = step
            queued.append(job(n, team, user, gpus=gpus, priority=priority))
        elif step[0] == "finish" and busy:
            busy.pop(sorted(busy)[step[1] % len(busy)])
        elif step[0] == "dispatch" and step[1] % len(workers) not in busy:
            w = step[1] % len(workers)
            snap = snapshot(policy, list(busy.values()), teams=teams, users=users)
            chosen = next_job(workers[w], queued, snap)
            if chosen is not None:
                assert chosen.gpus <= workers[w]
                queued.remove(chosen)
                busy[w] = running(n, chosen.team_id, chosen.user_id, gpus=chosen.gpus)
        assert_within_limits(busy.values(), lim, teams, users)


# ---- a job is offered only if no eligible better-ranked job exists --------------------------


def reference_key(c: Candidate, snap: Snapshot) -> tuple:
    """The ranking written out from docs/scheduling.md, independently of the module."""
    if not snap.policy.fair_share:
        return (-c.priority, c.created_at, c.job_id)

    def factor(u: float, total_u: float, w: float, total_w: float) -> float:
        return 1.0 if total_u == 0 else 2 ** (-(u / total_u) / (w / total_w))

    teams = snap.teams
    team = teams.get(c.team_id) if c.team_id else None
    # jobs of no team are one more team of weight 1, once seen (used, queued or running)
    seen = (
        snap.no_team_usage > 0 or None in snap.waiting or snap.by_team.get(None, Tally()).jobs > 0
    )
    total_u = sum(t.usage for t in teams.values()) + snap.no_team_usage
    total_w = sum(t.weight for t in teams.values()) + (1.0 if seen else 0.0)
    f_team = (
        factor(team.usage, total_u, team.weight, total_w)
        if team
        else factor(snap.no_team_usage, total_u, 1.0, max(total_w, 1.0))
    )
    weight = team.weight if team else 1.0
    peers = {u: x for (t, u), x in snap.member_usage.items() if t == c.team_id}
    f_user = (
        factor(peers.get(c.user_id, 0.0), sum(peers.values()), 1, max(len(peers), 1))
        if c.team_id and c.user_id
        else 1.0
    )
    team_gpus = snap.by_team.get(c.team_id, Tally()).gpus
    user_gpus = snap.by_member.get((c.team_id, c.user_id or ""), Tally()).gpus
    return (-f_team, team_gpus / weight, -f_user, user_gpus, -c.priority, c.created_at, c.job_id)


candidates_st = st.lists(
    st.builds(
        lambda n, team, user, gpus, priority: job(n, team, user, gpus=gpus, priority=priority),
        st.integers(0, 50),
        st.sampled_from(TEAM_IDS),
        st.sampled_from([*USER_IDS, None]),
        st.integers(1, 8),
        st.sampled_from([0, 10, 20, 30]),
    ),
    max_size=25,
    unique_by=lambda c: c.job_id,
)
usage_st = st.sampled_from([0.0, 0.0, 100.0, 3600.0, 86400.0, 1e6])


@settings(max_examples=200, deadline=None)
@given(
    queued=candidates_st,
    busy=st.lists(
        st.builds(
            lambda n, team, user, gpus: running(1000 + n, team, user, gpus=gpus),
            st.integers(0, 50),
            st.sampled_from(TEAM_IDS),
            st.sampled_from(USER_IDS),
            st.integers(1, 4),
        ),
        max_size=8,
    ),
    lim=limits_st,
    fair_share=st.booleans(),
    usages=st.lists(usage_st, min_size=3, max_size=3),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3),
    members=st.dictionaries(
        st.tuples(st.sampled_from(TEAM_IDS[:3]), st.sampled_from(USER_IDS)), usage_st
    ),
    worker_gpus=st.integers(1, 8),
)
def test_a_job_is_offered_only_when_no_eligible_job_ranks_above_it(
    queued, busy, lim, fair_share, usages, weights, members, worker_gpus
):
    teams = {
        tid: TeamState(tid, tid[2:], weight=w, usage=u)
        for tid, u, w in zip(TEAM_IDS[:3], usages, weights, strict=True)
    }
    users = {uid: UserState(uid, uid[2:], Level.RESEARCHER) for uid in USER_IDS}
    policy = Policy(limits=lim, fair_share=fair_share)
    snap = snapshot(policy, busy, teams=teams, users=users, member_usage=members)

    def eligible(c: Candidate) -> bool:
        """Fits the worker, and each scope it counts in stays within its limit with it."""
        t = tallies([*busy, running(9999, c.team_id, c.user_id, gpus=c.gpus)])
        scopes = [
            (t["fleet"][None], lim.max_jobs, lim.max_gpus),
            (t["team"][c.team_id], lim.team_max_jobs, lim.team_max_gpus),
        ]
        if c.user_id:
            scopes.append((t["user"][c.user_id], lim.user_max_jobs, lim.user_max_gpus))
        within = all(
            (jobs is None or tally.jobs <= jobs) and (gpus is None or tally.gpus <= gpus)
            for tally, jobs, gpus in scopes
        )
        return within and c.gpus <= worker_gpus

    by_rank = sorted(queued, key=lambda c: reference_key(c, snap))
    expected = next((c for c in by_rank if eligible(c)), None)
    assert next_job(worker_gpus, queued, snap) == expected
    for c in queued:
        assert (limit_hit(c, snap) is None) is eligible(c) or c.gpus > worker_gpus


def test_without_fair_share_priority_then_age_decides():
    snap = snapshot(Policy())
    old_low, new_high, old_high = job(1, priority=0), job(3, priority=20), job(2, priority=20)
    assert next_job(1, [old_low, new_high, old_high], snap) == old_high


def test_with_fair_share_the_team_below_its_share_goes_before_a_higher_priority():
    teams = {
        "t_nlp": TeamState("t_nlp", "nlp", usage=9 * HOUR),
        "t_cv": TeamState("t_cv", "cv", usage=1 * HOUR),
    }
    snap = snapshot(Policy(fair_share=True), teams=teams)
    urgent_nlp, plain_cv = job(1, "t_nlp", priority=30), job(2, "t_cv", priority=0)
    assert next_job(1, [urgent_nlp, plain_cv], snap) == plain_cv


def test_inside_a_team_the_member_furthest_below_their_share_goes_first():
    teams = {"t_nlp": TeamState("t_nlp", "nlp", usage=10 * HOUR)}
    members = {("t_nlp", "u_ann"): 9 * HOUR, ("t_nlp", "u_bob"): 1 * HOUR}
    snap = snapshot(Policy(fair_share=True), teams=teams, member_usage=members)
    anns, bobs = job(1, user="u_ann", priority=20), job(2, user="u_bob", priority=0)
    assert next_job(1, [anns, bobs], snap) == bobs


def test_between_teams_equally_served_the_one_running_less_for_its_weight_goes_first():
    teams = {
        "t_nlp": TeamState("t_nlp", "nlp", weight=2.0, usage=2 * HOUR),
        "t_cv": TeamState("t_cv", "cv", weight=1.0, usage=1 * HOUR),
    }
    busy = [running(n, "t_nlp") for n in range(3)] + [running(9, "t_cv", "u_bob")]
    snap = snapshot(Policy(fair_share=True), busy, teams=teams)
    assert fair_share_factor("t_nlp", snap) == fair_share_factor("t_cv", snap)
    nlp, cv = job(10, "t_nlp", "u_cy"), job(20, "t_cv", "u_dee")  # nlp's is older
    assert next_job(1, [cv, nlp], snap) == cv  # 1 GPU for weight 1 is less than 3 for 2


def test_a_job_too_big_for_the_worker_or_over_a_limit_is_passed_over():
    policy = Policy(limits=Limits(user_max_gpus=2))
    snap = snapshot(policy, [running(9, gpus=2)])
    big, anns, bobs = job(1, gpus=4), job(2), job(3, user="u_bob")
    assert next_job(2, [big, anns, bobs], snap) == bobs
    assert next_job(2, [big, anns], snap) is None


# ---- fair share converges -------------------------------------------------------------------


@dataclass
class Day:
    """A simulated day of a fleet of one-GPU workers with endless demand from every team."""

    weights: dict[str, float]
    seed: int
    fair_share: bool = True
    workers: int = 8
    gpu_minutes: dict[str, float] = field(default_factory=dict)

    def run(self, minutes: int = 24 * 60) -> dict[str, float]:
        rng = random.Random(self.seed)
        policy = Policy(fair_share=self.fair_share)
        usage = dict.fromkeys(self.weights, 0.0)
        members = {(t, u): 0.0 for t in self.weights for u in ("u_a", "u_b")}
        busy: dict[int, tuple[Running, int]] = {}  # worker -> (job, minute it ends)
        queued: list[Candidate] = []
        self.gpu_minutes = dict.fromkeys(self.weights, 0.0)
        n = 0
        for minute in range(minutes):
            busy = {w: (r, end) for w, (r, end) in busy.items() if end > minute}
            for w in range(self.workers):
                if w in busy:
                    continue
                for team in self.weights:  # endless demand: always three waiting
                    while sum(c.team_id == team for c in queued) < 3:
                        n += 1
                        queued.append(job(n, team, rng.choice(["u_a", "u_b"])))
                teams = {t: TeamState(t, t, weight=self.weights[t], usage=usage[t]) for t in usage}
                snap = snapshot(
                    policy, [r for r, _ in busy.values()], teams=teams, member_usage=members
                )
                chosen = next_job(1, queued, snap)
                assert chosen is not None
                queued.remove(chosen)
                r = running(chosen_n(chosen), chosen.team_id, chosen.user_id)
                busy[w] = (r, minute + rng.randint(5, 60))
            for t in usage:
                on = sum(r.team_id == t for r, _ in busy.values())
                usage[t] = accrue(usage[t], 60, on, policy.half_life_s)
                self.gpu_minutes[t] += on
            for key in members:
                on = sum((r.team_id, r.user_id) == key for r, _ in busy.values())
                members[key] = accrue(members[key], 60, on, policy.half_life_s)
        return self.gpu_minutes


def chosen_n(c: Candidate) -> int:
    return int(c.job_id.removeprefix("j_"))


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_two_teams_of_equal_weight_get_gpu_time_within_ten_percent_over_a_day(seed):
    got = Day({"t_a": 1.0, "t_b": 1.0}, seed).run()
    assert sum(got.values()) == 8 * 24 * 60  # the fleet never idles
    assert abs(got["t_a"] - got["t_b"]) <= 0.10 * max(got.values())


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_weights_of_two_to_one_give_gpu_time_of_two_to_one_within_ten_percent(seed):
    got = Day({"t_a": 2.0, "t_b": 1.0}, seed).run()
    assert got["t_a"] / got["t_b"] == pytest.approx(2.0, rel=0.10)


def test_without_fair_share_weights_do_not_divide_the_day():
    # The positive control: the simulation can fail; it is the ranking that makes it pass.
    got = Day({"t_a": 2.0, "t_b": 1.0}, seed=1, fair_share=False).run()
    assert got["t_a"] / got["t_b"] < 1.5


# ---- usage, factors, shares -----------------------------------------------------------------

half_lives = st.floats(min_value=1.0, max_value=1e8)
usages = st.floats(min_value=0.0, max_value=1e12)


@given(usage=usages, half_life=half_lives)
def test_usage_halves_at_one_half_life(usage, half_life):
    assert decay(usage, half_life, half_life) == pytest.approx(usage / 2)
    assert decay(usage, 2 * half_life, half_life) == pytest.approx(usage / 4)
    assert decay(usage, 0, half_life) == usage


@given(usage=usages, seconds=st.floats(min_value=0, max_value=1e7), half_life=half_lives)
def test_accruing_on_no_gpus_is_decay_and_each_gpu_adds_its_seconds(usage, seconds, half_life):
    assert accrue(usage, seconds, 0, half_life) == decay(usage, seconds, half_life)
    assert accrue(usage, seconds, 3, half_life) == pytest.approx(
        decay(usage, seconds, half_life) + 3 * seconds
    )


def test_a_half_life_of_zero_never_forgets():
    assert decay(100.0, 1e9, 0) == 100.0


def test_the_fair_share_factor_is_half_at_its_share_and_one_unused():
    teams = {
        "t_a": TeamState("t_a", "a", usage=50.0),
        "t_b": TeamState("t_b", "b", usage=50.0),
        "t_c": TeamState("t_c", "c", weight=2.0, usage=0.0),
    }
    snap = snapshot(Policy(fair_share=True), teams=teams)
    # a used half of everything with a quarter of the weight: 2 ** -(0.5 / 0.25)
    assert fair_share_factor("t_a", snap) == pytest.approx(0.25)
    assert fair_share_factor("t_c", snap) == 1.0
    assert fair_share_factor(None, snap) == 1.0
    assert fair_share_factor("t_a", snapshot(Policy(), teams={})) == 1.0


def test_a_share_divides_the_fleet_among_the_teams_with_demand_by_weight():
    teams = {
        "t_a": TeamState("t_a", "a", weight=3.0),
        "t_b": TeamState("t_b", "b", weight=1.0),
        "t_idle": TeamState("t_idle", "idle", weight=4.0),
    }
    snap = snapshot(Policy(), [running(1, "t_a")], teams=teams, fleet_gpus=8, waiting={"t_b"})
    assert share_gpus("t_a", snap) == 6.0
    assert share_gpus("t_b", snap) == 2.0
    assert share_gpus("t_idle", snap) == 8 * 4 / 8  # asking about it counts it as demanding


# ---- preemption -----------------------------------------------------------------------------

PREEMPTING = Policy(preemption=True, min_runtime_s=600)
victims_st = st.lists(
    st.builds(
        lambda n, team, prio, pre, age, being: running(
            n,
            team,
            "u_bob",
            priority=prio,
            preemptible=pre,
            started_at=T0 - timedelta(seconds=age),
            preempted_at=T0 if being else None,
        ),
        st.integers(0, 99),
        st.sampled_from(TEAM_IDS),
        st.sampled_from([0, 10, 20, 30]),
        st.sampled_from([None, True, False]),
        st.sampled_from([0, 60, 599, 600, 601, 7200]),
        st.booleans(),
    ),
    max_size=10,
    unique_by=lambda r: r.job_id,
)


@settings(max_examples=200, deadline=None)
@given(
    victims=victims_st,
    priority=st.sampled_from([0, 10, 20, 30]),
    team=st.sampled_from(TEAM_IDS),
    preemptible_teams=st.sets(st.sampled_from(TEAM_IDS[:3])),
    can_preempt=st.sets(st.sampled_from(TEAM_IDS[:3])),
    fair_share=st.booleans(),
)
def test_a_victim_is_preemptible_old_enough_not_being_preempted_and_the_lowest_ranked(
    victims, priority, team, preemptible_teams, can_preempt, fair_share
):
    teams = {
        t: TeamState(t, t, preemptible=t in preemptible_teams, can_preempt=t in can_preempt)
        for t in TEAM_IDS[:3]
    }
    policy = Policy(preemption=True, min_runtime_s=600, fair_share=fair_share)
    snap = snapshot(policy, victims, teams=teams, fleet_gpus=8)
    preemptor = job(500, team, "u_ann", priority=priority)

    def qualifies(r: Running) -> bool:
        team_flag = teams[r.team_id].preemptible if r.team_id else False
        preemptible = r.preemptible if r.preemptible is not None else team_flag
        old_enough = (T0 - r.started_at).total_seconds() >= 600
        return (
            preemptible
            and old_enough
            and r.preempted_at is None
            and (r.priority < priority or may_preempt(preemptor, r, snap))
        )

    chosen = choose_victim(preemptor, victims, snap)
    fit = [r for r in victims if qualifies(r)]
    if chosen is None:
        assert not fit
    else:
        assert chosen in fit
        lowest = max(rank_key(as_candidate(r), snap) for r in fit)
        assert rank_key(as_candidate(chosen), snap) == lowest


def test_no_victim_when_preemption_is_off():
    old = running(1, preemptible=True, priority=0)
    assert choose_victim(job(2, priority=30), [old], snapshot(Policy(), [old])) is None


def test_a_higher_priority_preempts_the_lowest_priority_youngest_job():
    jobs = [
        running(1, priority=0, preemptible=True, started_at=T0 - timedelta(hours=3)),
        running(2, priority=0, preemptible=True, started_at=T0 - timedelta(hours=1)),
        running(3, priority=10, preemptible=True),
        running(4, priority=0, preemptible=False),
    ]
    snap = snapshot(PREEMPTING, jobs)
    assert choose_victim(job(9, priority=20), jobs, snap) == jobs[1]
    assert choose_victim(job(9, priority=0), jobs, snap) is None  # equal priority is no reason


def test_a_team_below_its_share_reclaims_gpus_lent_to_a_team_past_its_own():
    teams = {
        "t_nlp": TeamState("t_nlp", "nlp", can_preempt=True),
        "t_cv": TeamState("t_cv", "cv", preemptible=True),
    }
    lent = [running(n, "t_cv", "u_bob") for n in range(8)]
    snap = snapshot(PREEMPTING, lent, teams=teams, fleet_gpus=8, waiting={"t_nlp"})
    assert choose_victim(job(9, "t_nlp"), lent, snap) is not None
    within = lent[:4]
    snap = snapshot(PREEMPTING, within, teams=teams, fleet_gpus=8, waiting={"t_nlp"})
    assert choose_victim(job(9, "t_nlp"), within, snap) is None  # cv runs only its share
    no_right = {**teams, "t_nlp": TeamState("t_nlp", "nlp")}
    snap = snapshot(PREEMPTING, lent, teams=no_right, fleet_gpus=8, waiting={"t_nlp"})
    assert choose_victim(job(9, "t_nlp"), lent, snap) is None  # nlp may not preempt


def test_a_victim_whose_end_would_not_lift_the_preemptors_limit_is_spared():
    policy = Policy(limits=Limits(user_max_gpus=1), preemption=True)
    mine = running(1, "t_nlp", "u_ann", priority=0, preemptible=True)
    other = running(2, "t_nlp", "u_bob", priority=0, preemptible=True)
    snap = snapshot(policy, [mine, other])
    assert choose_victim(job(9, priority=20), [other], snap) is None
    assert choose_victim(job(9, priority=20), [mine, other], snap) == mine


# ---- limits in words ------------------------------------------------------------------------


def test_a_team_at_its_gpu_limit_is_named_with_the_limit():
    teams = {"t_nlp": TeamState("t_nlp", "nlp", max_gpus=8)}
    snap = snapshot(Policy(), [running(1, gpus=8)], teams=teams)
    hit = limit_hit(job(2), snap)
    assert hit == LimitHit(LimitCode.TEAM_GPUS, "nlp", 8, 8, 1)
    assert str(hit) == "team nlp is at its limit of 8 GPUs"


@pytest.mark.parametrize(
    ("hit", "words"),
    [
        (LimitHit(LimitCode.FLEET_JOBS, None, 5, 5), "the fleet is at its limit of 5 running jobs"),
        (LimitHit(LimitCode.FLEET_GPUS, None, 8, 6, 4), "the fleet uses 6 of its limit of 8 GPUs;"),
        (LimitHit(LimitCode.TEAM_JOBS, None, 1, 1), "jobs of no team are at their limit of 1 "),
        (LimitHit(LimitCode.TEAM_GPUS, "nlp", 8, 0, 16), "the limit of team nlp is 8 GPUs, below"),
        (LimitHit(LimitCode.USER_JOBS, "ann", 2, 2), "user ann is at their limit of 2 running"),
        (LimitHit(LimitCode.USER_GPUS, "ann", 1, 1), "user ann is at their limit of 1 GPU"),
        (
            LimitHit(LimitCode.USER_QUEUED, "ann", 20, 20),
            "you have 20 queued jobs, the limit is 20",
        ),
    ],
)
def test_each_limit_says_itself_in_words(hit, words):
    assert str(hit).startswith(words)


def test_a_team_or_user_limit_of_its_own_replaces_the_policys():
    policy = Policy(limits=Limits(team_max_jobs=1, user_max_jobs=1))
    teams = {"t_nlp": TeamState("t_nlp", "nlp", max_jobs=3)}
    users = {"u_ann": UserState("u_ann", "ann", Level.LEAD, max_jobs=3)}
    snap = snapshot(policy, [running(1)], teams=teams, users=users)
    assert limit_hit(job(2), snap) is None
    assert limit_hit(job(3, "t_cv"), snap) is None  # cv runs nothing yet
    assert limit_hit(job(4, user="u_bob"), snap) is None  # bob runs nothing yet
    two_cv = snapshot(policy, [running(1, "t_cv", "u_bob")], teams=teams, users=users)
    assert limit_hit(job(5, "t_cv"), two_cv) == LimitHit(LimitCode.TEAM_JOBS, "t_cv", 1, 1)
    assert limit_hit(job(6, "t_nlp", "u_bob"), two_cv) == LimitHit(
        LimitCode.USER_JOBS, "u_bob", 1, 1
    )  # a user the snapshot does not name is named by id


def test_a_submit_past_the_queued_limit_is_refused_and_one_below_is_not():
    policy = Policy(limits=Limits(user_max_queued=20))
    ann = UserState("u_ann", "ann", Level.RESEARCHER)
    assert str(queued_limit_hit(ann, 20, policy)) == "you have 20 queued jobs, the limit is 20"
    assert queued_limit_hit(ann, 19, policy) is None
    generous = UserState("u_ann", "ann", Level.RESEARCHER, max_queued=50)
    assert queued_limit_hit(generous, 20, policy) is None
    assert queued_limit_hit(ann, 10**6, Policy()) is None


# ---- approvals and priorities ---------------------------------------------------------------


def test_viewers_jobs_wait_for_approval_by_default():
    assert approval_needed(Policy(), Level.VIEWER, 1) == (
        "viewers' jobs need a lead's or an admin's approval"
    )
    assert approval_needed(Policy(), Level.RESEARCHER, 64) is None


def test_jobs_over_the_gpu_rule_wait_for_approval_except_an_admins():
    policy = Policy(approve_gpus_over=4, approve_levels=frozenset())
    assert approval_needed(policy, Level.RESEARCHER, 4) is None
    assert approval_needed(policy, Level.LEAD, 5) == (
        "jobs asking more than 4 GPUs need a lead's or an admin's approval"
    )
    assert approval_needed(policy, Level.ADMIN, 64) is None
    assert approval_needed(policy, Level.VIEWER, 1) is None


@pytest.mark.parametrize("level", list(Level))
def test_no_priority_asked_gives_the_levels_default(level):
    assert check_priority(level, None) == LEVEL_PRIORITY[level]
    assert check_priority(level, LEVEL_PRIORITY[level] - 5) == LEVEL_PRIORITY[level] - 5


def test_the_level_defaults_are_simpletuners():
    assert [LEVEL_PRIORITY[lv] for lv in Level] == [30, 20, 10, 0]


@pytest.mark.parametrize("level", [Level.RESEARCHER, Level.VIEWER])
def test_a_researcher_or_viewer_may_not_ask_above_their_default(level):
    with pytest.raises(Forbidden, match="ask a lead or an admin") as caught:
        check_priority(level, LEVEL_PRIORITY[level] + 1)
    assert f"at most {LEVEL_PRIORITY[level]}" in caught.value.message


@pytest.mark.parametrize("level", [Level.LEAD, Level.ADMIN])
def test_a_lead_or_admin_may_ask_any_priority(level):
    assert check_priority(level, 99) == 99


# ---- the worked example of docs/scheduling.md -----------------------------------------------


def test_the_worked_example_in_docs_scheduling_md_holds():
    teams = {
        "t_nlp": TeamState("t_nlp", "nlp", weight=2, usage=120 * HOUR),
        "t_cv": TeamState("t_cv", "cv", weight=1, usage=30 * HOUR, can_preempt=True),
        "t_rl": TeamState("t_rl", "rl", weight=1, usage=50 * HOUR, preemptible=True),
    }
    members = {
        ("t_cv", "u_ann"): 25 * HOUR,
        ("t_cv", "u_bob"): 5 * HOUR,
        ("t_nlp", "u_cy"): 120 * HOUR,
        ("t_rl", "u_dee"): 50 * HOUR,
    }

    def ago(minutes: int) -> datetime:
        return T0 - timedelta(minutes=minutes)

    rl = [
        running(n, "t_rl", "u_dee", gpus=g, started_at=ago(m))
        for n, g, m in [(1, 2, 180), (2, 2, 120), (3, 2, 45), (4, 1, 30), (5, 2, 5)]
    ]
    busy = [*rl, *(running(10 + n, "t_nlp", "u_cy", priority=20) for n in range(5))]
    busy.append(running(20, "t_cv", "u_ann", gpus=2))
    policy = Policy(fair_share=True, preemption=True)
    snap = snapshot(
        policy, busy, teams=teams, member_usage=members, fleet_gpus=16, waiting={"t_cv"}
    )
    assert snap.fleet == Tally(11, 16)
    factors = {t: round(fair_share_factor(t, snap), 3) for t in teams}
    assert factors == {"t_nlp": 0.435, "t_cv": 0.660, "t_rl": 0.500}
    assert [share_gpus(t, snap) for t in teams] == [8.0, 4.0, 4.0]
    j1 = Candidate("j_1", "t_nlp", "u_cy", 1, 20, ago(50))
    j2 = Candidate("j_2", "t_rl", "u_dee", 1, 30, ago(40))
    j3 = Candidate("j_3", "t_cv", "u_ann", 2, 10, ago(30))
    j4 = Candidate("j_4", "t_cv", "u_bob", 2, 10, ago(10))
    assert [round(x, 3) for x in rank_key(j3, snap)[:3]] == [-0.66, 2.0, -0.315]
    assert [round(x, 3) for x in rank_key(j4, snap)[:3]] == [-0.66, 2.0, -0.794]
    queue = [j1, j2, j3, j4]
    assert sorted(queue, key=lambda c: rank_key(c, snap)) == [j4, j3, j2, j1]
    unfair = snapshot(Policy(), busy, teams=teams)
    assert sorted(queue, key=lambda c: rank_key(c, unfair)) == [j2, j1, j3, j4]
    two_gpu_workers = [r for r in busy if r.gpus == 2]
    assert choose_victim(j4, two_gpu_workers, snap) == rl[2]
    assert decay(200 * HOUR, 7 * 86400, policy.half_life_s) == pytest.approx(100 * HOUR)
    assert round(decay(200 * HOUR, 86400, policy.half_life_s) / HOUR, 1) == 181.1
    capped = snapshot(Policy(limits=Limits(team_max_gpus=5)), busy, teams=teams)
    assert str(limit_hit(j1, capped)) == "team nlp is at its limit of 5 GPUs"


def test_jobs_of_no_team_rank_as_a_team_of_weight_one_with_their_users_usage():
    now = datetime(2026, 11, 23, tzinfo=UTC)
    teams = {"t_nlp": TeamState(id="t_nlp", name="nlp", usage=100.0)}
    policy = Policy(fair_share=True)
    heavy = Snapshot(policy=policy, now=now, teams=teams, no_team_usage=300.0)
    light = Snapshot(policy=policy, now=now, teams=teams, no_team_usage=10.0)
    nlp, loner = job(1, team="t_nlp"), job(2, team=None, user="u_bob")
    # a user in no team who used three times what team nlp used waits behind it
    assert rank_key(nlp, heavy) < rank_key(loner, heavy)
    assert rank_key(loner, light) < rank_key(nlp, light)
    assert fair_share_factor(None, heavy) == pytest.approx(2 ** -(300 / 400 / 0.5))
