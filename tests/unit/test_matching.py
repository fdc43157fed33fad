"""Which worker may run which job, which one gets it, and why a job waits."""

from __future__ import annotations

import dataclasses
from fnmatch import fnmatchcase

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpufleet.domain.matching import (
    ANY_LABELS,
    MAX_LISTED_LABELS,
    Capacity,
    Feature,
    Requirement,
    WaitCode,
    Why,
    available,
    can_run_now,
    choose_worker,
    fits,
    label_mismatches,
    labels_match,
    match_key,
    match_keys_for,
    needs_of,
    reasons_not_running,
    targets_served,
    why_waiting,
)
from gpufleet.domain.states import Target, WorkerStatus, WorkerType

KEYS = ["gpu", "zone", "team", "os"]
VALUES = ["a100", "h100", "h200", "us-east", "us-west", "eu", "ml", "linux", "A100", ""]
PATTERNS = [*VALUES, "*", "?100", "h*", "us-*", "[ah]100", "*-west", "[!a]*", "eu*", "??"]

label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
wanted_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(PATTERNS), max_size=3)


def requirement(
    target: Target = Target.AUTO, gpu_count: int = 1, labels: dict | None = None
) -> Requirement:
    return Requirement(target=target, gpu_count=gpu_count, labels=labels or {})


def capacity(worker_id: str = "w_1", **fields) -> Capacity:
    values = {
        "name": worker_id,
        "status": WorkerStatus.IDLE,
        "gpu_count": 1,
        "labels": {},
        "is_local": False,
    }
    values.update(fields)
    return Capacity(worker_id=worker_id, **values)


# Jobs and workers for the matcher's properties are drawn from finite pools built once:
# one draw a value keeps hundreds of examples cheap, and the pools cover every target,
# status, worker type and GPU edge (none, zero, too few) against broad and narrow labels.
WORKER_LABELS: list[dict[str, str]] = [
    {},
    {"gpu": "a100"},
    {"gpu": "A100"},
    *(
        {"gpu": g, "zone": z}
        for g in ("a100", "h100", "h200")
        for z in ("us-east", "us-west", "eu")
    ),
    {"gpu": "h100", "zone": "eu", "team": "ml", "os": "linux"},
    {"team": "ml", "os": ""},
]
WANTED_LABELS: list[dict[str, str]] = [
    {},
    {"gpu": "*"},
    *({"gpu": p} for p in ("a100", "h*", "?100", "[ah]100", "[!a]*", "A100")),
    *({"zone": p} for p in ("us-*", "*-west", "eu", "??")),
    {"gpu": "h*", "zone": "us-*"},
    {"team": "ml"},
    {"os": ""},
]
REQUIREMENTS = [
    Requirement(target=t, gpu_count=n, labels=labels)
    for t in Target
    for n in range(5)
    for labels in WANTED_LABELS
]
CAPACITIES = [
    Capacity(
        worker_id="w_a",
        name="worker",
        status=status,
        gpu_count=gpus,
        labels=labels,
        is_local=is_local,
        worker_type=worker_type,
        spent=spent,
        current_job_id=job if status is WorkerStatus.BUSY else None,
    )
    for status in WorkerStatus
    for gpus in (None, 0, 1, 2, 4, 8)
    for labels in WORKER_LABELS
    for is_local in (False, True)
    for worker_type, spent in (
        (WorkerType.PERSISTENT, False),
        (WorkerType.EPHEMERAL, False),
        (WorkerType.EPHEMERAL, True),
    )
    for job in (("j_busy", None) if status is WorkerStatus.BUSY else (None,))
]
requirements = st.sampled_from(REQUIREMENTS)
# Idle workers are drawn about half the time so that many examples can run the job.
any_capacity = st.sampled_from(
    [c for c in CAPACITIES if c.status is WorkerStatus.IDLE]
) | st.sampled_from(CAPACITIES)


def capacities(worker_id: str | None = None) -> st.SearchStrategy[Capacity]:
    if worker_id is None:
        return any_capacity
    return any_capacity.map(lambda c: dataclasses.replace(c, worker_id=worker_id))


def fitting(req: Requirement, cap: Capacity) -> Capacity:
    """The same worker, changed just enough to fit the job (whatever its status)."""
    labels = dict(cap.labels)
    for key, pattern in req.labels.items():
        labels[key] = next(v for v in VALUES if fnmatchcase(v, pattern))
    return dataclasses.replace(
        cap,
        is_local=req.target is Target.LOCAL or (req.target is Target.AUTO and cap.is_local),
        gpu_count=max(req.gpu_count, cap.gpu_count or 0),
        labels=labels,
    )


@st.composite
def jobs_and_fleets(draw: st.DrawFn) -> tuple[Requirement, list[Capacity]]:
    """A job and up to five workers, about half of them changed to fit it."""
    req = draw(requirements)
    fleet = []
    for i in range(draw(st.integers(0, 5))):
        cap = draw(capacities(worker_id=f"w_{i:02d}"))
        fleet.append(fitting(req, cap) if draw(st.booleans()) else cap)
    return req, fleet


# ---- labels ---------------------------------------------------------------------------------


@settings(max_examples=200)
@given(wanted=wanted_sets, have=label_sets)
def test_labels_match_when_every_wanted_key_is_present_and_matches_its_glob(wanted, have):
    expected = all(key in have and fnmatchcase(have[key], pat) for key, pat in wanted.items())
    assert labels_match(wanted, have) is expected


@settings(max_examples=200)
@given(wanted=wanted_sets, have=label_sets)
def test_label_mismatches_name_each_failing_key_once_and_only_when_labels_do_not_match(
    wanted, have
):
    mismatches = label_mismatches(wanted, have)
    assert (mismatches == []) == labels_match(wanted, have)
    failing = [k for k, p in sorted(wanted.items()) if k not in have or not fnmatchcase(have[k], p)]
    assert len(mismatches) == len(failing)
    for key, text in zip(failing, mismatches, strict=True):
        assert key in str(text)


@settings(max_examples=300)
@given(wanted=wanted_sets, have=label_sets)
def test_the_match_key_index_never_hides_a_job_a_worker_can_run(wanted, have):
    """A freed worker reads, past the head of the queue, only the jobs whose match key is one
    of its own: every job whose labels it satisfies must be among them."""
    keys = match_keys_for(have)
    assert keys is not None
    if labels_match(wanted, have):
        assert match_key(wanted) in keys
    exact = not any(ch in v for v in wanted.values() for ch in "*?[")
    assert (match_key(wanted) == ANY_LABELS) is not exact


def test_a_job_key_ignores_the_order_of_its_labels_and_a_glob_makes_it_any():
    assert match_key({"zone": "eu", "gpu": "a100"}) == match_key({"gpu": "a100", "zone": "eu"})
    assert match_key({}) in match_keys_for({"gpu": "a100"})  # type: ignore[operator]
    assert match_key({"gpu": "a1?0"}) == ANY_LABELS
    assert match_key({"gpu": "x" * 600}) == ANY_LABELS  # too long to index: checked one by one


def test_a_worker_with_too_many_labels_lists_no_keys_and_reads_every_job():
    many = {f"k{n}": "v" for n in range(MAX_LISTED_LABELS + 1)}
    assert match_keys_for(many) is None
    assert len(match_keys_for(dict(list(many.items())[:3])) or []) == 1 + 2**3


@given(have=label_sets)
def test_no_wanted_labels_match_any_worker(have):
    assert labels_match({}, have)


@given(wanted=wanted_sets, have=label_sets, extra_key=st.text(min_size=1, max_size=5))
def test_extra_labels_on_a_worker_never_stop_a_match(wanted, have, extra_key):
    assume(extra_key not in have)
    if labels_match(wanted, have):
        assert labels_match(wanted, {**have, extra_key: "anything"})


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("a100", "a100", True),
        ("a100", "A100", False),  # case matters on every platform
        ("*100", "h100", True),
        ("h*", "a100", False),
        ("[ah]100", "h100", True),
        ("us-?ast", "us-east", True),
        ("*", "", True),
    ],
)
def test_label_values_are_case_sensitive_globs(pattern, value, matches):
    assert labels_match({"gpu": pattern}, {"gpu": value}) is matches


def test_label_keys_are_exact_not_globs():
    assert not labels_match({"g*": "*"}, {"gpu": "a100"})


def test_a_missing_label_is_named_with_the_wanted_pattern():
    assert [str(r) for r in label_mismatches({"zone": "us-*"}, {})] == [
        "has no label 'zone' (wanted zone=us-*)"
    ]


# ---- fits and can_run_now -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "is_local", "allowed"),
    [
        (Target.WORKER, False, True),
        (Target.WORKER, True, False),
        (Target.LOCAL, False, False),
        (Target.LOCAL, True, True),
        (Target.AUTO, False, True),
        (Target.AUTO, True, True),
    ],
)
def test_the_target_decides_between_remote_workers_and_the_local_runner(target, is_local, allowed):
    assert fits(requirement(target), capacity(is_local=is_local)) is allowed


@settings(max_examples=200)
@given(req=requirements, cap=capacities(), gpus=st.integers(0, 8), more=st.integers(1, 8))
def test_more_gpus_never_make_a_fitting_worker_unfit(req, cap, gpus, more):
    cap = dataclasses.replace(cap, gpu_count=gpus)
    bigger = dataclasses.replace(cap, gpu_count=gpus + more)
    if fits(req, cap):
        assert fits(req, bigger)
    if can_run_now(req, cap):
        assert can_run_now(req, bigger)


@settings(max_examples=200)
@given(req=requirements, cap=capacities(), fewer=st.integers(1, 8))
def test_asking_for_fewer_gpus_never_makes_a_fitting_worker_unfit(req, cap, fewer):
    smaller = dataclasses.replace(req, gpu_count=max(0, req.gpu_count - fewer))
    if fits(req, cap):
        assert fits(smaller, cap)


@given(req=requirements, cap=capacities(), data=st.data())
def test_a_worker_with_too_few_gpus_never_fits(req, cap, data):
    assume(req.gpu_count > 0)
    cap = dataclasses.replace(cap, gpu_count=data.draw(st.integers(0, req.gpu_count - 1)))
    assert not fits(req, cap)
    assert not can_run_now(req, cap)


@given(req=requirements, cap=capacities())
def test_an_unregistered_worker_may_fit_but_never_runs_a_job_now(req, cap):
    unknown = dataclasses.replace(cap, gpu_count=None)
    assert fits(req, unknown) == fits(req, dataclasses.replace(cap, gpu_count=10**6))
    assert not can_run_now(req, unknown)


@given(cap=capacities())
def test_only_an_idle_unspent_worker_is_available(cap):
    assert available(cap) is (cap.status is WorkerStatus.IDLE and not cap.spent)


# ---- choose_worker --------------------------------------------------------------------------


@settings(max_examples=200)
@given(job_and_fleet=jobs_and_fleets())
def test_the_chosen_worker_can_always_run_the_job_now(job_and_fleet):
    req, fleet = job_and_fleet
    chosen = choose_worker(req, fleet)
    if chosen is not None:
        assert chosen in fleet
        assert can_run_now(req, chosen)


@settings(max_examples=200)
@given(job_and_fleet=jobs_and_fleets())
def test_no_worker_is_chosen_exactly_when_none_can_run_the_job_now(job_and_fleet):
    req, fleet = job_and_fleet
    assert (choose_worker(req, fleet) is None) == (not any(can_run_now(req, c) for c in fleet))


@settings(max_examples=200)
@given(job_and_fleet=jobs_and_fleets())
def test_the_local_runner_is_never_chosen_while_an_idle_remote_worker_fits(job_and_fleet):
    req, fleet = job_and_fleet
    chosen = choose_worker(req, fleet)
    if any(can_run_now(req, c) and not c.is_local for c in fleet):
        assert chosen is not None
        assert not chosen.is_local


@settings(max_examples=200)
@given(job_and_fleet=jobs_and_fleets())
def test_the_chosen_worker_is_the_smallest_of_its_kind_that_can_run_the_job(job_and_fleet):
    req, fleet = job_and_fleet
    chosen = choose_worker(req, fleet)
    if chosen is None:
        return
    peers = [c for c in fleet if can_run_now(req, c) and c.is_local == chosen.is_local]
    assert chosen.gpu_count == min(c.gpu_count for c in peers)


@settings(max_examples=200)
@given(job_and_fleet=jobs_and_fleets(), data=st.data())
def test_the_choice_does_not_depend_on_the_order_of_the_fleet(job_and_fleet, data):
    req, fleet = job_and_fleet
    shuffled = data.draw(st.permutations(fleet))
    assert choose_worker(req, shuffled) == choose_worker(req, fleet)


def test_an_auto_job_prefers_a_remote_worker_over_a_smaller_local_runner():
    local = capacity("w_local", gpu_count=1, is_local=True)
    remote = capacity("w_big", gpu_count=8)
    assert choose_worker(requirement(Target.AUTO), [local, remote]) is remote


def test_an_auto_job_goes_to_the_local_runner_when_every_remote_worker_is_busy():
    local = capacity("w_local", is_local=True)
    remote = capacity("w_remote", status=WorkerStatus.BUSY, current_job_id="j_other")
    assert choose_worker(requirement(Target.AUTO), [remote, local]) is local


def test_the_smallest_fitting_worker_wins_so_big_machines_stay_free():
    workers = [capacity("w_8", gpu_count=8), capacity("w_2", gpu_count=2), capacity("w_1")]
    assert choose_worker(requirement(gpu_count=2), workers).worker_id == "w_2"


def test_equal_workers_are_broken_by_worker_id():
    workers = [capacity("w_b", gpu_count=2), capacity("w_a", gpu_count=2)]
    assert choose_worker(requirement(), workers).worker_id == "w_a"


def test_a_spent_ephemeral_worker_is_never_chosen():
    spent = capacity(worker_type=WorkerType.EPHEMERAL, spent=True)
    assert choose_worker(requirement(), [spent]) is None


def test_a_job_for_zero_gpus_can_run_on_a_worker_without_gpus():
    assert choose_worker(requirement(gpu_count=0), [capacity(gpu_count=0)]) is not None


# ---- reasons_not_running --------------------------------------------------------------------


@settings(max_examples=200)
@given(req=requirements, cap=capacities())
def test_a_worker_has_no_reasons_to_give_exactly_when_it_can_run_the_job_now(req, cap):
    assert (reasons_not_running(req, cap) == []) is can_run_now(req, cap)


@settings(max_examples=200)
@given(req=requirements, cap=capacities())
def test_a_worker_that_fits_only_gives_reasons_about_being_unavailable(req, cap):
    cap = fitting(req, cap)
    assert fits(req, cap)
    reasons = [str(r) for r in reasons_not_running(req, cap)]
    unavailable = ("is busy", "is draining", "is offline", "is connecting", "is ephemeral")
    assert all(reason.startswith(unavailable) for reason in reasons)


@pytest.mark.parametrize(
    ("cap", "req", "reason"),
    [
        (
            capacity(is_local=True),
            requirement(Target.WORKER),
            "is the orchestrator's local runner and the job's target is 'worker'",
        ),
        (
            capacity(),
            requirement(Target.LOCAL),
            "is a remote worker and the job's target is 'local'",
        ),
        (capacity(gpu_count=None), requirement(), "has never registered, so its GPUs are unknown"),
        (capacity(gpu_count=2), requirement(gpu_count=4), "has 2 GPU(s), the job needs 4"),
        (
            capacity(labels={"gpu": "a100"}),
            requirement(labels={"gpu": "h*"}),
            "label gpu='a100' does not match 'h*'",
        ),
        (
            capacity(status=WorkerStatus.BUSY, current_job_id="j_42"),
            requirement(),
            "is busy with job j_42",
        ),
        (capacity(status=WorkerStatus.BUSY), requirement(), "is busy"),
        (capacity(status=WorkerStatus.DRAINING), requirement(), "is draining"),
        (capacity(status=WorkerStatus.OFFLINE), requirement(), "is offline"),
        (
            capacity(status=WorkerStatus.CONNECTING),
            requirement(),
            "is connecting (its event stream is not open)",
        ),
        (
            capacity(worker_type=WorkerType.EPHEMERAL, spent=True),
            requirement(),
            "is ephemeral and has already run its one job",
        ),
    ],
    ids=[
        "local-for-worker",
        "remote-for-local",
        "unregistered",
        "too-few-gpus",
        "label",
        "busy-with-job",
        "busy",
        "draining",
        "offline",
        "connecting",
        "spent",
    ],
)
def test_each_reason_a_job_waits_is_said_in_words_an_operator_can_act_on(cap, req, reason):
    assert [str(r) for r in reasons_not_running(req, cap)] == [reason]


def test_a_spent_worker_that_is_offline_is_only_said_to_be_offline():
    cap = capacity(status=WorkerStatus.OFFLINE, worker_type=WorkerType.EPHEMERAL, spent=True)
    assert [str(r) for r in reasons_not_running(requirement(), cap)] == ["is offline"]


def test_every_reason_is_given_at_once():
    cap = capacity(is_local=True, gpu_count=1, labels={}, status=WorkerStatus.DRAINING, spent=True)
    req = requirement(Target.WORKER, gpu_count=2, labels={"zone": "eu"})
    assert len(reasons_not_running(req, cap)) == 5


@pytest.mark.parametrize("is_local", [False, True])
@pytest.mark.parametrize("target", list(Target))
def test_a_worker_is_asked_for_exactly_the_targets_it_fits(target, is_local):
    cap = capacity(is_local=is_local)
    served = targets_served(cap)
    assert (target.value in served) == fits(requirement(target=target, gpu_count=0), cap)


def test_the_local_runner_serves_local_and_auto_jobs_and_a_remote_worker_worker_and_auto():
    assert targets_served(capacity(is_local=True)) == ["local", "auto"]
    assert targets_served(capacity(is_local=False)) == ["worker", "auto"]


def test_a_job_with_a_workdir_goes_only_to_a_worker_that_unpacks_one_and_says_why() -> None:
    config = {"command": ["python", "train.py"], "workdir": "sha256:" + "a" * 64}
    req = Requirement(Target.WORKER, 0, {}, needs_of(config))
    assert req.needs == {Feature.COMMAND, Feature.WORKDIR}
    base = Capacity("w1", "w1", WorkerStatus.IDLE, 1, {}, is_local=False)
    older = dataclasses.replace(base, features=frozenset({Feature.COMMAND}))
    simpletuner = dataclasses.replace(base, worker_id="w2", name="w2", features=frozenset())
    current = dataclasses.replace(base, worker_id="w3", name="w3", features=frozenset(Feature))
    assert not fits(req, older) and not fits(req, simpletuner) and fits(req, current)
    reasons = reasons_not_running(req, older)
    assert [r.code for r in reasons] == [Why.NO_WORKDIR]
    assert "workdir" in str(reasons[0])
    assert Why.NO_WORKDIR in [r.code for r in reasons_not_running(req, simpletuner)]
    wait = why_waiting(req, [older, simpletuner])
    assert wait.code is WaitCode.NO_WORKER_MATCHES
    assert "unpacks a workdir" in wait.params["wanted"]
    assert choose_worker(req, [older, simpletuner, current]) == current


@pytest.mark.parametrize("field", ["requirements", "env_from", "setup"])
def test_a_job_with_an_environment_goes_only_to_a_worker_that_builds_one_and_says_why(
    field: str,
) -> None:
    config = {"command": ["python", "train.py"], "workdir": "sha256:" + "a" * 64, field: "x"}
    req = Requirement(Target.WORKER, 0, {}, needs_of(config))
    assert req.needs == {Feature.COMMAND, Feature.WORKDIR, Feature.ENV}
    base = Capacity("w1", "w1", WorkerStatus.IDLE, 1, {}, is_local=False)
    first_slice = dataclasses.replace(base, features=frozenset({Feature.COMMAND, Feature.WORKDIR}))
    current = dataclasses.replace(base, worker_id="w2", name="w2", features=frozenset(Feature))
    assert not fits(req, first_slice) and fits(req, current)
    reasons = reasons_not_running(req, first_slice)
    assert [r.code for r in reasons] == [Why.NO_ENV]
    assert "cannot build a job's environment" in str(reasons[0])
    assert "builds an environment" in why_waiting(req, [first_slice]).params["wanted"]
    assert choose_worker(req, [first_slice, current]) == current
