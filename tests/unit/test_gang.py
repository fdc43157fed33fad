"""Multi-node jobs: the gang rule of one dispatch round (`domain/gang.py`), property-tested,
and the config fields that shape a gang (`domain/jobspec.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.gang import (
    GANG_HOLD_S,
    Claim,
    Gang,
    Hold,
    Holding,
    Release,
    decide,
    eligible,
    plan,
)
from gpufleet.domain.jobspec import (
    MAX_NODES,
    GangShape,
    check_config,
    gang_shape,
    total_gpus,
)
from gpufleet.domain.matching import (
    AGENT_FEATURES,
    Capacity,
    Feature,
    Requirement,
    Why,
    needs_of,
    reasons_not_running,
)
from gpufleet.domain.states import Target, WorkerStatus
from gpufleet.errors import InvalidInput

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GANG = frozenset({Feature.COMMAND, Feature.GANG})
ANY = Requirement(Target.AUTO, 1, {})


def worker(
    i: int,
    *,
    zone: str | None = "a",
    gpus: int = 8,
    features: frozenset[Feature] | None = GANG,
    status: WorkerStatus = WorkerStatus.IDLE,
) -> Capacity:
    labels = {"zone": zone} if zone is not None else {}
    return Capacity(f"w{i:03}", f"w{i}", status, gpus, labels, False, features=features)


# ---- the config's fields ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({}, GangShape(1, 8)),
        ({"nodes": 1}, GangShape(1, 8)),
        ({"nodes": 4}, GangShape(4, 8)),
        ({"nodes": MAX_NODES, "same_label": "zone"}, GangShape(MAX_NODES, 8, "zone")),
        ({"nodes": 1, "same_label": "zone"}, GangShape(1, 8)),  # one node: ignored
        ({"nodes": None}, GangShape(1, 8)),
    ],
)
def test_a_configs_gang_shape_is_its_nodes_gpus_a_node_and_same_label(config, shape):
    assert check_config(config) is config
    assert gang_shape(8, config) == shape
    assert total_gpus(8, config) == shape.nodes * 8


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "got 0"),
        (65, "got 65"),
        (-1, "got -1"),
        (True, "got True"),
        (False, "got False"),
        (2.0, "got 2.0"),
        ("4", "got '4'"),
        ("4\x00", "got '4\\x00'"),
        (10**400, "got a number that large"),
        (2**63, "got a number that large"),
        ([4], "got [4]"),
        ({"n": 4}, "got {'n': 4}"),
    ],
)
def test_nodes_that_are_not_a_whole_number_from_1_to_64_are_refused_naming_the_field(value, shown):
    with pytest.raises(InvalidInput) as info:
        check_config({"nodes": value})
    assert "'nodes'" in str(info.value)
    assert "from 1 to 64" in str(info.value)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    "value", ["", "has space", "zone\x00", "-zone", "z" * 64, "ü", 4, True, ["zone"]]
)
def test_a_same_label_that_is_no_label_name_is_refused_naming_the_field(value):
    with pytest.raises(InvalidInput) as info:
        check_config({"nodes": 2, "same_label": value})
    assert "'same_label'" in str(info.value)


def test_a_bad_same_label_is_refused_even_for_one_node():
    with pytest.raises(InvalidInput, match="same_label"):
        check_config({"same_label": "a b"})


@given(st.integers(1, MAX_NODES), st.integers(0, 1024))
def test_a_jobs_gpus_in_all_are_its_nodes_times_its_gpus_a_node(nodes, gpus):
    assert total_gpus(gpus, {"nodes": nodes}) == nodes * gpus
    assert total_gpus(gpus, {}) == gpus  # one node: as before


def test_a_job_of_many_nodes_needs_gang_workers_and_one_node_does_not():
    assert Feature.GANG in needs_of({"nodes": 2})
    assert Feature.GANG not in needs_of({"nodes": 1})
    assert Feature.GANG not in needs_of({})
    req = Requirement(Target.AUTO, 1, {}, needs=needs_of({"nodes": 2}))
    no_gang = frozenset(AGENT_FEATURES) - {Feature.GANG}  # a released SimpleTuner agent's
    reasons = reasons_not_running(req, worker(1, features=no_gang))
    assert [r.code for r in reasons] == [Why.NO_GANG]
    assert "needs workers that run multi-node jobs (feature gang)" in str(reasons[0])


def test_the_gpufleet_worker_says_every_feature_gang_included():
    assert Feature.GANG in AGENT_FEATURES
    assert set(AGENT_FEATURES) == set(Feature)


# ---- one gang ---------------------------------------------------------------------------

zones = st.sampled_from(["a", "b", "c"])
fleets = st.lists(
    st.builds(
        lambda zone, gpus, gang, busy: (zone, gpus, gang, busy),
        st.one_of(st.none(), zones),
        st.integers(0, 8),
        st.booleans(),
        st.booleans(),
    ),
    max_size=14,
).map(
    lambda specs: [
        worker(
            i,
            zone=zone,
            gpus=gpus,
            features=GANG if gang else frozenset({Feature.COMMAND}),
            status=WorkerStatus.BUSY if busy else WorkerStatus.IDLE,
        )
        for i, (zone, gpus, gang, busy) in enumerate(specs)
    ]
)
shapes = st.builds(
    GangShape, st.integers(1, 5), st.integers(0, 8), st.one_of(st.none(), st.just("zone"))
)


@settings(max_examples=300)
@given(fleets, shapes, st.data())
def test_a_claim_is_exactly_n_distinct_matching_workers_of_one_label_value(fleet, shape, data):
    held = data.draw(st.sets(st.sampled_from([c.worker_id for c in fleet] or ["w999"])))
    holding = Holding(frozenset(held), T0) if held else None
    decision = decide("j_1", shape, ANY, fleet, holding, GANG_HOLD_S, T0)
    fit = [c for c in fleet if eligible(shape, ANY, c)]
    by_id = {c.worker_id: c for c in fleet}
    if isinstance(decision, Claim):
        ids = decision.worker_ids
        assert len(ids) == len(set(ids)) == shape.nodes  # never a partial gang
        assert all(eligible(shape, ANY, by_id[i]) for i in ids)
        if shape.same_label:
            assert len({by_id[i].labels["zone"] for i in ids}) == 1
    else:  # no complete set exists
        values = [c.labels.get("zone") for c in fit] if shape.same_label else [None] * len(fit)
        assert all(values.count(v) < shape.nodes for v in values)
    if isinstance(decision, Hold):
        assert len(decision.worker_ids) < shape.nodes  # never more held than it needs
        assert all(eligible(shape, ANY, by_id[i]) for i in decision.worker_ids)
        if shape.same_label:
            assert len({by_id[i].labels["zone"] for i in decision.worker_ids}) <= 1


@given(fleets, shapes)
def test_the_decision_is_the_same_whatever_order_the_workers_come_in(fleet, shape):
    one = decide("j_1", shape, ANY, fleet, None, GANG_HOLD_S, T0)
    other = decide("j_1", shape, ANY, list(reversed(fleet)), None, GANG_HOLD_S, T0)
    assert one == other


@given(fleets, shapes, st.floats(0, 1000))
def test_a_hold_is_released_once_it_has_lasted_gang_hold(fleet, shape, waited):
    first = decide("j_1", shape, ANY, fleet, None, GANG_HOLD_S, T0)
    if not isinstance(first, Hold) or not first.worker_ids:
        return
    holding = Holding(frozenset(first.worker_ids), first.since)
    later = decide("j_1", shape, ANY, fleet, holding, GANG_HOLD_S, T0 + timedelta(seconds=waited))
    if waited >= GANG_HOLD_S:
        assert isinstance(later, Release)
        assert set(later.worker_ids) == holding.worker_ids
        assert "released after 300 s held for job j_1" in later.reason
    else:
        assert later == first


def test_a_hold_says_for_which_job_and_how_many_of_its_nodes():
    fleet = [worker(1), worker(2), worker(3, status=WorkerStatus.BUSY)]
    decision = decide("j_abc", GangShape(4, 8), ANY, fleet, None, GANG_HOLD_S, T0)
    assert decision == Hold(("w001", "w002"), T0, "held for job j_abc (2 of 4 nodes)")


def test_a_gang_claims_the_label_group_that_completes_it_not_the_biggest_partial_one():
    fleet = [worker(1, zone="a"), worker(2, zone="b"), worker(3, zone="b"), worker(4, zone="c")]
    fleet += [worker(5, zone="c"), worker(6, zone="c")]
    decision = decide("j_1", GangShape(3, 8, "zone"), ANY, fleet, None, GANG_HOLD_S, T0)
    assert decision == Claim(("w004", "w005", "w006"))
    two = decide("j_1", GangShape(2, 8, "zone"), ANY, fleet, None, GANG_HOLD_S, T0)
    assert two == Claim(("w002", "w003"))  # the smallest group that completes it


def test_a_worker_without_gang_or_the_label_or_enough_gpus_is_never_a_node():
    fleet = [worker(1, features=None), worker(2, zone=None), worker(3, gpus=4), worker(4)]
    decision = decide("j_1", GangShape(2, 8, "zone"), ANY, fleet, None, GANG_HOLD_S, T0)
    assert decision == Hold(("w004",), T0, "held for job j_1 (1 of 2 nodes)")


def test_a_claim_takes_the_held_workers_first():
    fleet = [worker(i) for i in range(1, 5)]
    holding = Holding(frozenset({"w003", "w004"}), T0)
    decision = decide("j_1", GangShape(2, 8), ANY, fleet, holding, GANG_HOLD_S, T0)
    assert decision == Claim(("w003", "w004"))


# ---- two gangs and more ------------------------------------------------------------------


def test_only_the_first_gang_holds_and_one_behind_it_releases_what_it_held():
    fleet = [worker(i) for i in range(1, 6)]
    first = Gang("j_1", GangShape(4, 8), ANY)
    second = Gang("j_2", GangShape(4, 8), ANY, Holding(frozenset({"w004", "w005"}), T0))
    out = plan([first, second], fleet[:3] + fleet[3:], GANG_HOLD_S, T0)
    assert out["j_1"] == Hold(("w001", "w002", "w003"), T0, "held for job j_1 (3 of 4 nodes)")
    assert isinstance(out["j_2"], Release)
    assert out["j_2"].worker_ids == ("w004", "w005")
    assert "only the first gang in the queue holds" in out["j_2"].reason


def test_a_gang_behind_may_claim_a_complete_set_no_one_holds():
    fleet = [worker(1), worker(2), worker(3), worker(4, zone="b"), worker(5, zone="b")]
    first = Gang("j_1", GangShape(4, 8), Requirement(Target.AUTO, 8, {"zone": "a"}))
    second = Gang("j_2", GangShape(2, 8, "zone"), ANY)
    out = plan([first, second], fleet, GANG_HOLD_S, T0)
    assert out["j_1"] == Hold(("w001", "w002", "w003"), T0, "held for job j_1 (3 of 4 nodes)")
    assert out["j_2"] == Claim(("w004", "w005"))


def test_workers_a_released_hold_frees_go_to_a_gang_behind_in_the_same_round():
    fleet = [worker(1), worker(2), worker(3)]
    late = T0 + timedelta(seconds=GANG_HOLD_S)
    first = Gang("j_1", GangShape(4, 8), ANY, Holding(frozenset({"w001", "w002", "w003"}), T0))
    second = Gang("j_2", GangShape(3, 8), ANY)
    held = plan([first, second], fleet, GANG_HOLD_S, late - timedelta(seconds=1))
    assert isinstance(held["j_1"], Hold)
    assert isinstance(held["j_2"], Hold) and held["j_2"].worker_ids == ()
    out = plan([first, second], fleet, GANG_HOLD_S, late)
    assert isinstance(out["j_1"], Release)
    assert out["j_2"] == Claim(("w001", "w002", "w003"))


def _taken(out: dict[str, Claim | Hold | Release]) -> list[str]:
    return [w for d in out.values() if isinstance(d, Claim | Hold) for w in d.worker_ids]


gang_specs = st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=2, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    gang_specs,
    st.lists(st.tuples(zones, st.booleans()), min_size=1, max_size=10),
    st.lists(st.lists(st.integers(0, 9), max_size=3), min_size=1, max_size=40),
    st.sampled_from([0.0, 60.0, 300.0]),
)
def test_gangs_never_share_a_worker_never_deadlock_and_one_completes_when_workers_suffice(
    specs, fleet_spec, arrivals, hold_s
):
    """Rounds a minute apart: busy workers free up as `arrivals` say, `plan` decides, holds
    and claims are applied (a claimed worker runs its gang's job from then on)."""
    step = timedelta(seconds=60)
    gangs = [
        Gang(f"j_{k}", GangShape(n, 1, "zone" if same else None), ANY)
        for k, (n, same) in enumerate(specs)
    ]
    fleet = {
        c.worker_id: c
        for c in (
            worker(i, zone=zone, gpus=1, status=WorkerStatus.IDLE if idle else WorkerStatus.BUSY)
            for i, (zone, idle) in enumerate(fleet_spec)
        )
    }
    now = T0
    stable_rounds = 0
    for round_no in range(len(arrivals) + int(hold_s / 60) + 4):
        for i in arrivals[round_no] if round_no < len(arrivals) else []:
            key = f"w{i:03}"
            if key in fleet and fleet[key].current_job_id is None:
                fleet[key] = worker(i, zone=fleet[key].labels["zone"], gpus=1)
        idle = [c for c in fleet.values() if c.status is WorkerStatus.IDLE]
        out = plan(gangs, idle, hold_s, now)
        taken = _taken(out)
        assert len(taken) == len(set(taken))  # no worker held or claimed for two gangs
        holders = [d for d in out.values() if isinstance(d, Hold) and d.worker_ids]
        assert len(holders) <= 1  # one holder: no two gangs each holding part
        for d in out.values():
            if isinstance(d, Claim):
                assert len(d.worker_ids) == len(set(d.worker_ids))
        claimed = {j: d for j, d in out.items() if isinstance(d, Claim)}
        completable = any(
            isinstance(decide(g.job_id, g.shape, ANY, idle, None, hold_s, now), Claim)
            for g in gangs
        )
        stable_rounds = stable_rounds + 1 if completable and not claimed else 0
        # a gang that could complete from the idle workers does so within the hold's length
        assert stable_rounds <= hold_s / 60 + 2
        next_gangs = []
        for g in gangs:
            d = out[g.job_id]
            if isinstance(d, Claim):
                for w in d.worker_ids:
                    c = fleet[w]
                    fleet[w] = Capacity(
                        w,
                        c.name,
                        WorkerStatus.BUSY,
                        1,
                        c.labels,
                        False,
                        current_job_id=g.job_id,
                        features=GANG,
                    )
                continue
            hold = Holding(frozenset(d.worker_ids), d.since) if isinstance(d, Hold) else None
            next_gangs.append(Gang(g.job_id, g.shape, g.requirement, hold))
        gangs = next_gangs
        now += step
        if not gangs:
            break


def test_nodes_past_what_python_writes_out_are_refused_without_writing_them():
    with pytest.raises(InvalidInput, match="got a number that large"):
        check_config({"nodes": 10**5000})
