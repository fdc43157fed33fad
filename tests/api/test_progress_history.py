"""A job's progress history (`GET /api/queue/{id}/progress`): stored with each report,
thinned to a bound, with step, total, rate and ETA; hostile values are skipped."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain import history as rules
from tests.api.conftest import HEARTBEAT_TIMEOUT, Agent, Fleet, both_databases, post_raw


async def running_job(fleet: Fleet) -> tuple[Agent, dict[str, Any]]:
    agent = await fleet.online_worker("gpu-1")
    await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    return agent, offer


async def report(agent: Agent, offer: dict[str, Any], progress: dict[str, Any]) -> None:
    answer = await agent.report(
        offer["job_id"], "running", attempt_id=offer["attempt_id"], progress=progress
    )
    assert answer.status_code == 200, answer.text


async def history(fleet: Fleet, job_id: str) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/progress")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def series(data: dict[str, Any]) -> dict[str, list[list[float]]]:
    return {s["name"]: s["points"] for s in data["series"]}


async def test_reported_metrics_come_back_by_step_with_rate_and_eta(fleet: Fleet) -> None:
    agent, offer = await running_job(fleet)
    for step in range(0, 50, 10):  # 10 steps a second
        loss = 1.0 / (step + 1)
        await report(agent, offer, {"step": step, "total": 100, "metrics": {"loss": loss}})
        fleet.clock.advance(1)
    await report(agent, offer, {"step": 50, "total": 100, "metrics": {"loss": 0.02, "lr": 0.1}})

    data = await history(fleet, offer["job_id"])

    assert (data["status"], data["step"], data["total"]) == ("running", 50, 100)
    assert data["rate"] == pytest.approx(10.0)
    assert data["eta_s"] == pytest.approx(5.0)
    assert data["capacity"] == rules.CAPACITY
    charts = series(data)
    assert list(charts) == ["loss", "lr"]  # loss first
    assert [p[0] for p in charts["loss"]] == [0, 10, 20, 30, 40, 50]
    assert charts["loss"][0] == [0, 1.0, 1]  # [step, value, attempt]
    assert charts["lr"] == [[50, 0.1, 1]]


async def test_the_final_report_ends_the_eta_and_adds_no_repeated_point(fleet: Fleet) -> None:
    agent, offer = await running_job(fleet)
    await report(agent, offer, {"step": 1, "total": 2, "metrics": {"loss": 0.5}})
    fleet.clock.advance(1)
    last = {"step": 2, "total": 2, "metrics": {"loss": 0.25}}
    await report(agent, offer, last)
    await agent.finish(offer, exit_code=0, progress=last)

    data = await history(fleet, offer["job_id"])

    assert data["status"] == "completed"
    assert data["eta_s"] is None
    assert data["rate"] == pytest.approx(1.0)
    assert series(data)["loss"] == [[1, 0.5, 1], [2, 0.25, 1]]


async def test_a_report_carries_every_line_since_the_last_so_the_chart_starts_at_the_start(
    fleet: Fleet,
) -> None:
    agent, offer = await running_job(fleet)
    lines = [{"step": s, "total": 300, "metrics": {"loss": 0.693 - s / 1000}} for s in range(50)]
    for batch in (lines[:24], lines[24:]):  # what the worker read in each of two seconds
        answer = await agent.report(
            offer["job_id"],
            "running",
            attempt_id=offer["attempt_id"],
            progress=batch[-1],
            points=batch[:-1],
        )
        assert answer.status_code == 200, answer.text
    again = await agent.report(  # a retried send adds nothing twice
        offer["job_id"], "running", attempt_id=offer["attempt_id"], progress=lines[-1], points=lines
    )
    assert again.status_code == 200, again.text

    loss = series(await history(fleet, offer["job_id"]))["loss"]

    assert [p[0] for p in loss] == list(range(50))
    assert loss[0] == [0, 0.693, 1]


async def test_a_batch_that_outgrows_the_capacity_is_thinned_as_if_sent_one_by_one(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "CAPACITY", 6)
    agent, offer = await running_job(fleet)
    lines = [{"step": step, "metrics": {"loss": float(step)}} for step in range(50)]
    for first in range(0, 50, 7):
        batch = lines[first : first + 7]
        await agent.report(
            offer["job_id"],
            "running",
            attempt_id=offer["attempt_id"],
            progress=batch[-1],
            points=batch[:-1],
        )

    steps = [p[0] for p in series(await history(fleet, offer["job_id"]))["loss"]]

    assert steps == rules.kept(49, 6)


async def test_a_report_with_too_many_points_is_refused_and_stores_none(fleet: Fleet) -> None:
    agent, offer = await running_job(fleet)
    lines = [{"step": s, "metrics": {"loss": 1.0}} for s in range(202)]
    answer = await agent.report(
        offer["job_id"],
        "running",
        attempt_id=offer["attempt_id"],
        progress=lines[-1],
        points=lines[:-1],
    )

    assert answer.status_code == 413
    assert "over the limit of 200" in answer.json()["detail"]
    assert series(await history(fleet, offer["job_id"])) == {}


@both_databases
async def test_a_long_run_keeps_a_bounded_evenly_thinned_history(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "CAPACITY", 6)
    agent, offer = await running_job(fleet)
    for step in range(50):
        await report(agent, offer, {"step": step, "metrics": {"loss": float(step)}})

    data = await history(fleet, offer["job_id"])

    steps = [p[0] for p in series(data)["loss"]]
    assert steps == rules.kept(49, 6) == [0, 16, 32, 48, 49]
    assert data["capacity"] == 6
    stored = await fleet.all_stored_text()
    assert stored.count("progress_points: ") == 2 * 5  # loss and the step itself


async def test_values_that_cannot_be_charted_are_skipped(fleet: Fleet) -> None:
    agent, offer = await running_job(fleet)
    many = {f"m{i:02}": 1.0 for i in range(40)}
    hostile = {
        "loss": 0.5,
        "huge": 1e308,
        "none": None,
        "text": "0.5",
        "flag": True,
        "nested": {"loss": 1.0},
        "list": [1.0, 2.0],
        "x" * 65: 1.0,
        **many,
    }
    await report(agent, offer, {"step": 1, "total": 10, "metrics": hostile})
    await report(agent, offer, {"step": "two", "metrics": {"loss": 0.4}})  # no usable step
    await report(agent, offer, {"step": 2**60, "metrics": {"loss": 0.3}})  # past exact
    refused = await post_raw(
        fleet.http,
        f"/api/workers/job/{offer['job_id']}/status",
        {
            "status": "running",
            "attempt_id": offer["attempt_id"],
            "progress": {"step": 3, "loss": float("nan")},
        },
        **agent.headers,
    )
    assert refused.status_code == 422

    data = await history(fleet, offer["job_id"])

    charts = series(data)
    assert charts["loss"] == [[1, 0.5, 1]]
    assert len(charts) == rules.MAX_SERIES  # loss and the first 31 of the rest, by name
    assert not {"huge", "none", "text", "flag", "nested", "list", "x" * 65} & set(charts)
    assert data["step"] is None  # the latest progress has no usable step
    assert (await fleet.job(offer["job_id"]))["progress"]["step"] == 2**60


async def test_a_retried_job_keeps_each_attempts_points_and_paces_the_latest(
    fleet: Fleet,
) -> None:
    lost, offer = await running_job(fleet)
    for step in (10, 20):  # 10 steps a second on the first worker
        await report(lost, offer, {"step": step, "total": 100, "metrics": {"loss": 1.0}})
        fleet.clock.advance(1)
    spare = await fleet.online_worker("spare")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await spare.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [lost.id]
    again = await spare.next_offer()
    await spare.run(again)
    for step in (0, 2, 4):  # 2 steps a second on the spare, from the start
        await report(spare, again, {"step": step, "total": 100, "metrics": {"loss": 0.5}})
        fleet.clock.advance(1)

    data = await history(fleet, offer["job_id"])

    assert series(data)["loss"] == [
        [10, 1.0, 1],
        [20, 1.0, 1],
        [0, 0.5, 2],
        [2, 0.5, 2],
        [4, 0.5, 2],
    ]
    assert data["rate"] == pytest.approx(2.0)
    assert data["eta_s"] == pytest.approx(48.0)


async def test_a_job_without_progress_has_an_empty_history(fleet: Fleet) -> None:
    job = await fleet.submit()

    data = await history(fleet, job["id"])

    assert data == {
        "job_id": job["id"],
        "status": "queued",
        "step": None,
        "total": None,
        "rate": None,
        "eta_s": None,
        "updated_at": None,
        "capacity": rules.CAPACITY,
        "series": [],
    }


@pytest.mark.parametrize(
    ("job_id", "status", "hint"),
    [
        ("j_nosuchjob", 404, "list jobs"),
        ("x" * 5000, 404, "list jobs"),
        ("j_<script>ü", 404, "list jobs"),
        ("%00", 422, "remove it"),
    ],
)
async def test_an_unknown_or_impossible_job_id_is_refused_saying_what_to_do(
    fleet: Fleet, job_id: str, status: int, hint: str
) -> None:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/progress")
    assert answer.status_code == status, answer.text
    assert hint in answer.json()["detail"]
