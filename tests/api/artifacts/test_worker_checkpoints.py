"""Checkpoints and resumes through the worker API (docs/artifacts.md), on SQLite and
PostgreSQL, through the data folder and object storage: a checkpoint is committed once whole,
the next attempt after a lost or preempted one resumes from the newest one committed while its
attempt was live, never from a fenced one; upload tokens; replicas sharing the work."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.domain.secrets import check_upload_token
from tests.api.artifacts.uploads import (
    announce,
    commit,
    metric,
    new_bucket,
    running_job,
    send,
    sha,
    start_fleet,
    upload,
    upload_checkpoint,
)
from tests.api.conftest import HEARTBEAT_TIMEOUT, Agent, Fleet, both_databases


async def test_a_lost_attempts_checkpoint_is_where_the_next_attempt_resumes_from(
    any_fleet: Fleet,
) -> None:
    fleet = any_fleet
    first = await fleet.online_worker("first")
    offer = await running_job(fleet, first)
    files = {"weights.bin": secrets.token_bytes(200_000), "state.json": b'{"step": 1200}'}
    committed = await upload_checkpoint(first, offer, 1200, files)
    assert committed.status_code == 201, committed.text
    checkpoint = committed.json()
    assert (checkpoint["name"], checkpoint["path"], checkpoint["step"]) == (
        "checkpoint-1200",
        "output/checkpoint-1200",
        1200,
    )
    assert (checkpoint["files"], checkpoint["size"]) == (2, sum(map(len, files.values())))

    second = await fleet.online_worker("second")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await second.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [first.id]
    resumed = await second.next_offer()

    assert resumed["job_id"] == offer["job_id"]
    assert resumed["resume"] == {
        "checkpoint_id": checkpoint["id"],
        "name": "checkpoint-1200",
        "path": "output/checkpoint-1200",
        "step": 1200,
        "attempt_id": offer["attempt_id"],
        "attempt_number": 1,
    }
    async with fleet.ctx.store.read() as q:
        attempt = await q.get_attempt(resumed["attempt_id"])
    assert attempt is not None and attempt.resumed_from == checkpoint["id"]
    await second.run(resumed)
    fetched = await fleet.http.get(
        f"/api/workers/job/{offer['job_id']}/checkpoints/{checkpoint['id']}",
        params={"attempt_id": resumed["attempt_id"]},
        headers=second.headers,
    )
    assert fetched.status_code == 200, fetched.text
    body = fetched.json()
    assert (body["id"], body["name"], body["step"]) == (checkpoint["id"], "checkpoint-1200", 1200)
    got = {}
    for f in body["files"]:
        if fleet.ctx.artifacts.presigns:
            assert f["url"].startswith("http://127.0.0.1:")  # presigned, the bucket's own
            async with httpx.AsyncClient() as bucket:
                answer = await bucket.get(f["url"], headers=f["headers"])
        else:
            assert f["url"].startswith(f"/api/workers/job/{offer['job_id']}/artifacts/r_")
            answer = await fleet.http.get(f["url"], headers={**second.headers, **f["headers"]})
            assert answer.headers["x-gpufleet-sha256"] == f["sha256"]
        assert answer.status_code == 200
        assert sha(answer.content) == f["sha256"] and len(answer.content) == f["size"]
        got[f["path"].removeprefix("output/checkpoint-1200/")] = answer.content
    assert got == files


# ---- checkpoints ----------------------------------------------------------------------------


async def test_a_checkpoint_is_committed_only_when_every_file_is_stored_as_listed(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    w = b"weights"
    await upload(
        agent,
        offer["job_id"],
        offer["attempt_id"],
        "output/checkpoint-5/w.bin",
        w,
        kind="checkpoint",
        checkpoint="checkpoint-5",
    )
    as_artifact = await upload(
        agent, offer["job_id"], offer["attempt_id"], "output/checkpoint-5/o", w
    )
    files = [
        {"path": "output/checkpoint-5/w.bin", "size": len(w), "sha256": sha(w)},
        {"path": "output/checkpoint-5/o", "size": len(w), "sha256": sha(w)},  # not as checkpoint
        {"path": "output/checkpoint-5/missing", "size": 1, "sha256": "1" * 64},
    ]
    wrong_sha = [{**files[0], "sha256": "2" * 64}]
    outside = [{"path": "output/elsewhere/w.bin", "size": len(w), "sha256": sha(w)}]
    no_checkpoint_name = await announce(
        agent, offer["job_id"], offer["attempt_id"], "output/checkpoint-5/z", w, kind="checkpoint"
    )

    partial = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, files)
    mismatched = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, wrong_sha)
    stray = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, outside)
    pathy = await commit(agent, offer, "a/b", "output/checkpoint-5", 5, files[:1])
    whole = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, files[:1])

    assert partial.status_code == 422
    detail = partial.json()["detail"]
    assert "'output/checkpoint-5/o'" in detail and "'output/checkpoint-5/missing'" in detail
    assert "'output/checkpoint-5/w.bin'" not in detail
    assert mismatched.status_code == 422 and "w.bin" in mismatched.json()["detail"]
    assert stray.status_code == 422 and "not in the checkpoint's folder" in stray.json()["detail"]
    assert pathy.status_code == 422 and no_checkpoint_name.status_code == 422
    assert whole.status_code == 201, whole.text
    async with fleet.ctx.store.read() as q:
        stored = await q.checkpoints_for_job(offer["job_id"])
    assert [(c.name, c.files, c.attempt_number) for c in stored] == [("checkpoint-5", 1, 1)]
    assert as_artifact["kind"] == "artifact"


async def test_a_fenced_attempts_checkpoint_is_never_offered_to_resume_from(
    fleet: Fleet,
) -> None:
    """Attempt 1 checkpoints at step 100 and is lost; attempt 2 resumes from it. The lost
    worker comes back and tries to commit step 200 for attempt 1: refused. A checkpoint row of
    attempt 1 written after it ended (as if past the fence) is not offered either; when
    attempt 2 is preempted, attempt 3 still resumes from step 100, attempt 1's last live one."""
    silent = await fleet.online_worker("silent")
    offer = await running_job(fleet, silent, max_retries=1)
    assert (await upload_checkpoint(silent, offer, 100, {"w": b"100"})).status_code == 201
    spare = await fleet.online_worker("spare")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await spare.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [silent.id]
    second = await spare.next_offer()
    assert second["resume"]["name"] == "checkpoint-100"
    await spare.run(second)

    late_file = await announce(
        silent,
        offer["job_id"],
        offer["attempt_id"],
        "output/checkpoint-200/w",
        b"200",
        kind="checkpoint",
        checkpoint="checkpoint-200",
    )
    late_commit = await commit(
        silent,
        offer,
        "checkpoint-100",  # its files are stored: only the fence refuses it
        "output/checkpoint-100",
        100,
        [{"path": "output/checkpoint-100/w", "size": 3, "sha256": sha(b"100")}],
    )
    assert (late_file.status_code, late_commit.status_code) == (409, 409), late_commit.text
    async with fleet.ctx.store.write() as q:  # a row that got past the fence, somehow
        await q.insert_checkpoint(
            {
                "id": "k_fenced",
                "job_id": offer["job_id"],
                "attempt_id": offer["attempt_id"],
                "name": "checkpoint-900",
                "path": "output/checkpoint-900",
                "step": 900,
                "files": 1,
                "size": 1,
                "created_at": fleet.clock.advance(1),
            }
        )
    preempted = await spare.report(
        offer["job_id"], "preempted", attempt_id=second["attempt_id"], error="spot notice"
    )
    assert preempted.status_code == 200 and preempted.json()["job_status"] == "queued"
    third = await spare.next_offer()

    assert third["attempt_id"] not in (offer["attempt_id"], second["attempt_id"])
    assert third["resume"]["checkpoint_id"] != "k_fenced"
    assert (third["resume"]["name"], third["resume"]["attempt_number"]) == ("checkpoint-100", 1)


async def test_a_preempted_attempt_is_requeued_without_spending_a_retry(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent, max_retries=0)
    answer = await agent.report(
        offer["job_id"], "preempted", attempt_id=offer["attempt_id"], error="spot notice"
    )
    assert answer.status_code == 200 and answer.json()["job_status"] == "queued"
    again = await agent.next_offer()
    await agent.run(again)
    lost = await agent.report(offer["job_id"], "failed", attempt_id=again["attempt_id"])

    detail = await fleet.job(offer["job_id"])
    assert [a["status"] for a in detail["attempt_history"]] == ["preempted", "failed"]
    assert detail["attempt_history"][0]["error"] == "spot notice"
    assert lost.json()["job_status"] == "failed"  # its one run, not the preemption, spent it
    assert again["resume"] is None  # nothing was checkpointed
    scraped = (await fleet.admin.get("/metrics")).text
    assert metric(scraped, 'gpufleet_requeues_total{reason="preempted"}') == 1


async def test_a_preempted_job_goes_to_another_idle_worker_not_back_to_the_leaving_one(
    fleet: Fleet,
) -> None:
    """The worker that reported `preempted` is going away: the job is offered to another
    idle worker, and the leaving one is offered nothing (it would only be withdrawn)."""
    lane = {"lane": "preempt"}
    first = await fleet.online_worker("spot-1", labels=lane)
    second = await fleet.online_worker("spot-2", labels=lane)
    await fleet.submit(worker_labels=lane)
    seen = [e for e in await first.stream.collect(0.3) if e["type"] == "job_submit"]
    holder, other = (first, second) if seen else (second, first)
    offer = seen[0] if seen else await second.next_offer()
    await holder.run(offer)
    await holder.stream.collect(0.2)  # a resend that went out before the acknowledgement

    answer = await holder.report(
        offer["job_id"], "preempted", attempt_id=offer["attempt_id"], error="spot notice"
    )
    assert answer.status_code == 200, answer.text
    again = await other.next_offer()
    assert again["job_id"] == offer["job_id"]
    late = await holder.stream.collect(0.5)
    assert late == [], (offer, again)


async def test_an_attempt_after_a_failed_one_starts_afresh(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent, max_retries=1, retry_on=["failed"])
    assert (await upload_checkpoint(agent, offer, 10, {"w": b"w"})).status_code == 201
    await agent.finish(offer, "failed", exit_code=1)
    again = await agent.next_offer()
    assert again["job_id"] == offer["job_id"] and again["resume"] is None


async def test_a_checkpoint_is_fetched_only_by_the_live_attempt_of_its_own_job(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1", labels={"slot": "a"})
    offer = await running_job(fleet, agent, worker_labels={"slot": "a"})
    checkpoint = (await upload_checkpoint(agent, offer, 1, {"w": b"w"})).json()
    other = await fleet.online_worker("gpu-2", labels={"slot": "b"})
    foreign = await running_job(fleet, other, worker_labels={"slot": "b"})

    def fetch(job_id: str, attempt_id: str | None, who: Agent) -> Any:
        params = {"attempt_id": attempt_id} if attempt_id else {}
        return fleet.http.get(
            f"/api/workers/job/{job_id}/checkpoints/{checkpoint['id']}",
            params=params,
            headers=who.headers,
        )

    own = await fetch(offer["job_id"], offer["attempt_id"], agent)
    wrong_job = await fetch(foreign["job_id"], foreign["attempt_id"], other)
    wrong_worker = await fetch(offer["job_id"], offer["attempt_id"], other)
    unnamed = await fetch(offer["job_id"], None, agent)
    await agent.finish(offer)
    after = await fetch(offer["job_id"], offer["attempt_id"], agent)
    download = await fleet.http.get(own.json()["files"][0]["url"], headers=agent.headers)

    assert own.status_code == 200 and [f["path"] for f in own.json()["files"]] == [
        "output/checkpoint-1/w"
    ]
    assert wrong_job.status_code == 404
    assert wrong_worker.status_code == 403
    assert unnamed.status_code == 422 and "attempt_id" in unnamed.json()["detail"]
    assert after.status_code == 409 and download.status_code == 409


# ---- upload tokens --------------------------------------------------------------------------


async def test_each_attempt_has_its_own_upload_token_the_same_on_every_resend(
    fleet: Fleet,
) -> None:
    a = await fleet.online_worker("gpu-1")
    b = await fleet.online_worker("gpu-2")
    await fleet.submit()
    await fleet.submit()
    first, second = await a.next_offer(), await b.next_offer()
    assert a.stream is not None
    await a.stream.close()
    resent = await (await a.open_stream()).expect("job_submit")

    assert first["upload_token"] != second["upload_token"]
    assert resent["attempt_id"] == first["attempt_id"]
    assert resent["upload_token"] == first["upload_token"]
    key = fleet.ctx.audit_key
    assert check_upload_token(key, first["attempt_id"], first["upload_token"])
    assert check_upload_token(key, second["attempt_id"], second["upload_token"])
    assert not check_upload_token(key, second["attempt_id"], first["upload_token"])
    assert not check_upload_token(key, first["attempt_id"], first["upload_token"][:-1])
    assert first["upload_token"] not in await fleet.all_stored_text()


# ---- replicas --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["folder", "s3"])
@both_databases
async def test_an_upload_announced_on_one_replica_is_taken_by_the_other(
    tmp_path: Path,
    postgres_url: str,
    backend: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two orchestrators on one database (and one data folder, or one bucket): the upload id
    and the checkpoint's URLs carry all they need, so either replica takes any step."""
    url = (
        new_bucket(request.getfixturevalue("s3_endpoint"), monkeypatch) if backend == "s3" else None
    )
    one = await start_fleet(tmp_path, postgres_url, artifacts=url)
    two = await start_fleet(tmp_path, postgres_url, artifacts=url)
    try:
        agent = await one.online_worker("gpu-1")
        offer = await running_job(one, agent)
        job_id, attempt_id = offer["job_id"], offer["attempt_id"]
        data = secrets.token_bytes(300_000)
        as_two = Agent(two, agent.id, agent.token, agent.name)

        plan = (
            await announce(
                agent, job_id, attempt_id, "output/c-1/w", data, kind="checkpoint", checkpoint="c-1"
            )
        ).json()
        sent = await send(as_two, job_id, plan, data)
        assert sent.status_code == 201, sent.text
        files = [{"path": "output/c-1/w", "size": len(data), "sha256": sha(data)}]
        committed = await commit(agent, offer, "c-1", "output/c-1", 1, files)
        assert committed.status_code == 201, committed.text
        fetched = await two.http.get(
            f"/api/workers/job/{job_id}/checkpoints/{committed.json()['id']}",
            params={"attempt_id": attempt_id},
            headers=agent.headers,
        )
        (f,) = fetched.json()["files"]
        if plan["via"] == "orchestrator":
            got = (await one.http.get(f["url"], headers=agent.headers)).content
        else:
            async with httpx.AsyncClient() as bucket:
                got = (await bucket.get(f["url"])).content
        assert got == data
    finally:
        await two.stop()
        await one.stop()
