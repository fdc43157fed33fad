"""Jobs reach the right worker over its stream and run to the end in either dialect."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise
from typing import Any

import pytest
from sqlalchemy import event

from gpufleet.domain.matching import match_key
from gpufleet.domain.secrets import new_id
from gpufleet.server import streams
from gpufleet.server.services import dispatch
from gpufleet.store import Queries
from tests.api.conftest import Agent, Fleet, both_databases
from tests.waiting import wait_until_async


async def test_the_stream_delivers_a_job_as_a_job_submit_event(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1", gpu_count=2)

    job = await fleet.submit(config={"command": ["python", "train.py"], "env": {"A": "1"}})
    offer = await agent.next_offer()

    assert offer["job_id"] == job["id"]
    assert offer["attempt_id"].startswith("a_")
    assert offer["config"] == {"command": ["python", "train.py"], "env": {"A": "1"}}
    assert offer["command"] == ["python", "train.py"]
    assert offer["env"] == {"A": "1"}
    assert offer["upload_endpoint"] == f"/api/workers/job/{job['id']}/upload"
    assert offer["upload_token"].startswith("ut_") and len(offer["upload_token"]) > 40
    assert offer["resume"] is None  # a first attempt starts afresh
    assert offer["dataloader"] is None
    assert agent.stream is not None
    assert agent.stream.frames[-1].startswith("event: job_submit\ndata: {")
    assert (await fleet.job(job["id"]))["status"] == "offered"
    assert (await agent.info())["current_job_id"] == job["id"]


async def test_an_unacknowledged_offer_is_sent_again_when_the_stream_reopens(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    first = await agent.next_offer()
    assert agent.stream is not None
    await agent.stream.close()

    await agent.open_stream()
    again = await agent.next_offer()

    assert again["job_id"] == job["id"]
    assert again["attempt_id"] == first["attempt_id"]


@both_databases
async def test_the_claim_hands_its_offer_to_the_stream_without_a_read_back(
    fleet: Fleet,
) -> None:
    """The offer goes out as the claim that wrote it hands it over: the woken stream does
    not read the database for it (the read costs three queries and, across replicas, most
    of the latency)."""
    stream_reads: list[tuple[float, str]] = []

    def capture(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "FROM worker_events" in statement:  # the stream's read of what waits for it
            stream_reads.append((time.monotonic(), statement))

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        agent = await fleet.online_worker("gpu-1")
        assert agent.stream is not None and await agent.stream.collect() == []
        # The stream's first read of what waits for the worker, which a loaded machine may
        # run late: once it is seen, any other read is the one this test must not find.
        await wait_until_async(lambda: stream_reads, timeout=5, message="the stream's first read")
        stream_reads.clear()
        submitted = time.monotonic()
        job = await fleet.submit()
        offer = await agent.next_offer()
        again = await agent.stream.collect()
        # Before the first resend could be due (a resend asks the database first, rightly):
        # on a loaded machine the steps above can outlast it.
        resend_due = submitted + streams.FIRST_RESEND
        assert again == [] or time.monotonic() >= resend_due, again  # sent once, or resent
        handed_over = [statement for at, statement in stream_reads if at < resend_due]
        # The control: the stream's own read of what waits for a worker is seen.
        async with fleet.ctx.store.write() as q:
            assert await q.take_events(agent.id) == []
    finally:
        event.remove(engine, "before_cursor_execute", capture)

    assert offer["job_id"] == job["id"]
    assert offer["attempt_id"] == (await fleet.job(job["id"]))["current_attempt_id"]
    assert handed_over == []
    assert stream_reads != []


@both_databases
async def test_a_submit_that_finds_an_idle_worker_commits_once(fleet: Fleet) -> None:
    """The job is queued and offered in one transaction: one commit, not one to queue it
    and another to offer it."""
    agent = await fleet.online_worker("gpu-1")
    commits: list[object] = []

    def committed(conn: object) -> None:
        commits.append(conn)

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "commit", committed)
    try:
        job = await fleet.submit()
    finally:
        event.remove(engine, "commit", committed)

    assert len(commits) == 1
    assert job["status"] == "offered"
    assert (await agent.next_offer())["attempt_id"] == job["current_attempt_id"]
    kinds = [e["event_type"] for e in await fleet.audit(target=job["id"])]
    assert sorted(kinds) == ["job.dispatched", "job.status_changed", "job.submitted"]


@both_databases
async def test_a_submit_whose_idle_worker_is_taken_meanwhile_keeps_the_job(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the submit's look at the idle workers and its claim, another dispatch takes
    the worker (injected: the worker's compare-and-set fails once). The job is committed
    queued all the same, with nothing of the lost claim, and the next pass offers it."""
    agent = await fleet.online_worker("gpu-1")
    real = Queries.claim_worker
    lost: list[str] = []

    async def taken_once(self: Queries, worker_id: str, status: Any, **values: Any) -> bool:
        if not lost:
            lost.append(worker_id)
            return False
        return await real(self, worker_id, status, **values)

    monkeypatch.setattr(Queries, "claim_worker", taken_once)
    job = await fleet.submit()

    assert lost == [agent.id]
    offer = await agent.next_offer()
    view = await fleet.job(job["id"])
    assert view["status"] == "offered" and view["attempts"] == 1
    assert [a["id"] for a in view["attempt_history"]] == [offer["attempt_id"]]
    assert (await agent.info())["current_job_id"] == job["id"]
    submitted = await fleet.audit(target=job["id"], type="job.submitted")
    assert len(submitted) == 1


@both_databases
async def test_an_ignored_offer_goes_out_again_on_the_open_stream_until_acknowledged(
    fleet: Fleet,
) -> None:
    """A worker still finishing its last job ignores a new offer (both agents do): the
    stream sends it again every third of the ack timeout, and stops once it is taken."""
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"ack_timeout": 0.9})
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    first = await agent.next_offer()

    again = await agent.next_offer()
    assert (again["job_id"], again["attempt_id"]) == (job["id"], first["attempt_id"])

    await agent.run(again)
    assert agent.stream is not None and await agent.stream.collect(0.7) == []  # 2 resends


async def test_an_idle_stream_pings_every_ping_interval(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep-alives at the documented interval (proxies drop quiet connections), not at the
    next resend tick after it: with a 0.5 s interval and 0.4 s ticks, every 0.5 s, not 0.8."""
    monkeypatch.setattr(fleet.ctx.keepalive, "interval", 0.5)
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"ack_timeout": 1.2})
    agent = await fleet.online_worker("gpu-1")
    assert agent.stream is not None
    loop = asyncio.get_running_loop()
    pings: list[float] = []
    clock = asyncio.create_task(fleet.ctx.keepalive.run())  # the `pings` loop of the server
    try:
        while len(pings) < 5:
            event = await agent.stream.next()
            if event is not None and event["type"] == "ping":
                pings.append(loop.time())
    finally:
        clock.cancel()
        await asyncio.gather(clock, return_exceptions=True)
    gaps = sorted(b - a for a, b in pairwise(pings))
    assert 0.45 < gaps[len(gaps) // 2] < 0.7, gaps


async def test_a_heartbeat_naming_the_job_the_worker_holds_changes_nothing(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    await agent.run(await agent.next_offer(), dialect="simpletuner")

    answer = await agent.heartbeat(status="busy", current_job_id=job["id"])

    assert answer.json() == {"ok": True, "status": "busy", "draining": False}
    assert agent.stream is not None and await agent.stream.collect() == []
    assert (await fleet.job(job["id"]))["status"] == "running"


@pytest.mark.parametrize("dialect", ["gpufleet", "simpletuner"])
@both_databases
async def test_a_job_runs_from_submit_to_completed(fleet: Fleet, dialect: str) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()

    ack = "acknowledged" if dialect == "gpufleet" else "starting"
    run = "running" if dialect == "gpufleet" else "training"
    fence = {"attempt_id": offer["attempt_id"]} if dialect == "gpufleet" else {}

    acked = await agent.report(job["id"], ack, **fence)
    assert acked.json() == {"ok": True, "job_status": "offered"}
    assert (await fleet.job(job["id"]))["attempt_history"][0]["status"] == "acknowledged"

    running = await agent.report(job["id"], run, **fence)
    assert running.json() == {"ok": True, "job_status": "running"}
    assert (await fleet.job(job["id"]))["started_at"] is not None

    done = await agent.report(job["id"], "completed", error=None, **fence)
    assert done.json() == {"ok": True, "job_status": "completed"}

    final = await fleet.job(job["id"])
    assert final["status"] == "completed"
    assert final["exit_code"] == 0
    assert final["attempts"] == 1
    assert [a["status"] for a in final["attempt_history"]] == ["completed"]
    worker = await agent.info()
    assert worker["status"] == "idle"
    assert worker["current_job_id"] is None
    assert worker["jobs_run"] == 1


async def test_progress_reported_while_running_shows_on_the_job(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)

    progress = {"step": 10, "total": 100, "metrics": {"loss": 0.42}}
    answer = await agent.report(
        job["id"], "running", attempt_id=offer["attempt_id"], progress=progress
    )

    assert answer.status_code == 200
    assert (await fleet.job(job["id"]))["progress"] == progress


async def test_log_lines_sent_by_the_worker_are_read_back_in_order(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)

    sent = await agent.logs(
        job["id"],
        [
            {"stream": "stdout", "text": "epoch 1"},
            {"stream": "stderr", "text": "warning: slow disk"},
            {"stream": "stdout", "text": "epoch 2"},
        ],
        attempt_id=offer["attempt_id"],
    )
    read = await fleet.admin.get(f"/api/queue/{job['id']}/logs")

    assert sent.status_code == 200
    body = read.json()
    assert [(line["stream"], line["text"]) for line in body["lines"]] == [
        ("stdout", "epoch 1"),
        ("stderr", "warning: slow disk"),
        ("stdout", "epoch 2"),
    ]
    assert {line["attempt_id"] for line in body["lines"]} == {offer["attempt_id"]}
    later = await fleet.admin.get(
        f"/api/queue/{job['id']}/logs", params={"after": body["lines"][0]["seq"]}
    )
    assert [line["text"] for line in later.json()["lines"]] == ["warning: slow disk", "epoch 2"]
    assert later.json()["next_after"] == body["next_after"]


async def test_a_failed_run_keeps_its_exit_code_and_last_log_lines(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=0)
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.logs(
        job["id"],
        [{"stream": "stderr", "text": "CUDA out of memory"}],
        attempt_id=offer["attempt_id"],
    )

    await agent.finish(offer, "failed", exit_code=3)

    final = await fleet.job(job["id"])
    assert final["status"] == "failed"
    assert final["exit_code"] == 3
    assert "exited with code 3" in final["error"]
    assert "CUDA out of memory" in final["error"]


async def test_the_gpu_count_comes_from_num_processes_in_the_config(fleet: Fleet) -> None:
    one = await fleet.online_worker("one-gpu", gpu_count=1)
    two = await fleet.online_worker("two-gpus", gpu_count=2)

    job = await fleet.submit(config={"num_processes": 2})

    assert job["gpu_count"] == 2
    assert (await two.next_offer())["job_id"] == job["id"]
    assert one.stream is not None and await one.stream.collect() == []


async def test_a_stored_config_is_sent_by_name(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1", gpu_count=2)
    stored = await fleet.admin.put(
        "/api/configs/my-config", json={"--num_processes": 2, "model": "flux"}
    )
    assert stored.status_code == 200

    job = await fleet.submit(config_name="my-config", config=None)

    assert job["gpu_count"] == 2
    offer = await agent.next_offer()
    # A SimpleTuner config that publishes nowhere is also told to publish home (#17).
    publishing = offer["config"].pop("publishing_config")
    assert offer["config"] == {"--num_processes": 2, "model": "flux"}
    assert [p["endpoint_url"].rsplit("/api/", 1)[1] for p in publishing] == ["cloud/storage"]
    assert offer["command"] is None


async def test_worker_labels_match_as_glob_patterns(fleet: Fleet) -> None:
    h100 = await fleet.online_worker("h100", labels={"gpu_type": "h100"})
    a100 = await fleet.online_worker("a100", labels={"gpu_type": "a100-80g"})

    job = await fleet.submit(worker_labels={"gpu_type": "a100*"})

    assert (await a100.next_offer())["job_id"] == job["id"]
    assert h100.stream is not None and await h100.stream.collect() == []


async def test_a_job_asking_for_a_label_no_worker_has_waits_and_names_the_label(
    fleet: Fleet,
) -> None:
    await fleet.online_worker("a100", labels={"gpu_type": "a100"})

    answer = await fleet.admin.post(
        "/api/queue/submit",
        json={"config": {}, "worker_labels": {"gpu_type": "tpu*"}},
    )

    assert answer.status_code == 201
    job = await fleet.job(answer.json()["id"])
    assert job["status"] == "queued"
    assert job["waiting"]["summary"] == (
        "no remote worker registered has gpu_type=tpu*; it waits until one does: create and "
        "start a worker that matches (POST /api/admin/workers), or relax gpu_count / "
        "worker_labels"
    )
    assert await _waiting_reasons(fleet, job["id"]) == {
        "a100": ["label gpu_type='a100' does not match 'tpu*'"]
    }


async def test_a_job_submitted_to_an_empty_fleet_waits_and_says_what_it_needs(
    fleet: Fleet,
) -> None:
    answer = await fleet.admin.post(
        "/api/queue/submit",
        json={"config": {}, "gpu_count": 2, "worker_labels": {"team": "nlp"}},
    )

    assert answer.status_code == 201
    job = await fleet.job(answer.json()["id"])
    assert job["status"] == "queued"
    assert job["waiting"]["summary"].startswith(
        "no remote worker registered has 2 GPUs and team=nlp; it waits until one does"
    )
    assert job["waiting"]["workers"] == []


async def test_a_job_waits_for_a_spot_worker_to_register_then_runs_there(fleet: Fleet) -> None:
    # A cloud fleet starts because jobs wait: its worker record exists, its GPUs and the labels
    # its agent reports are not known until it registers.
    spot = await fleet.create_worker("spot-1", worker_type="ephemeral")

    job = await fleet.submit(
        config={"model_type": "lora"}, gpu_count=2, worker_labels={"team": "nlp"}
    )

    detail = await fleet.job(job["id"])
    assert detail["status"] == "queued"
    assert detail["waiting"]["summary"].startswith(
        "no remote worker registered has 2 GPUs and team=nlp; "
    )
    assert await _waiting_reasons(fleet, job["id"]) == {
        "spot-1": [
            "has never registered, so its GPUs are unknown",
            "has no label 'team' (wanted team=nlp)",
            "is connecting (its event stream is not open)",
        ]
    }

    await spot.connect(gpu_count=2, gpu_name="Test GPU", labels={"team": "nlp"})

    assert (await spot.next_offer())["job_id"] == job["id"]


async def test_a_job_that_fits_a_worker_not_registered_yet_names_it(fleet: Fleet) -> None:
    await fleet.create_worker("spot-1", labels={"team": "nlp"})

    job = await fleet.submit(
        config={"model_type": "lora"}, gpu_count=1, worker_labels={"team": "nlp"}
    )

    assert (await fleet.job(job["id"]))["waiting"]["summary"] == (
        "no remote worker registered has 1 GPU and team=nlp; spot-1 may, once it registers "
        "(its GPUs are not known yet)"
    )


async def test_target_local_without_a_local_runner_is_refused(fleet: Fleet) -> None:
    await fleet.online_worker("gpu-1")

    answer = await fleet.admin.post("/api/queue/submit", json={"config": {}, "target": "local"})

    assert answer.status_code == 422
    assert "local" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0


async def test_higher_priority_jobs_are_offered_first_then_oldest_first(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    blocker = await fleet.submit()
    submitted = {}
    for name, priority in [("low", 0), ("high", 10), ("mid-a", 5), ("mid-b", 5)]:
        fleet.clock.advance(1)
        submitted[(await fleet.submit(priority=priority))["id"]] = name

    order = []
    offer = await agent.next_offer()
    assert offer["job_id"] == blocker["id"]
    for _ in submitted:
        await agent.run(offer)
        await agent.finish(offer)
        offer = await agent.next_offer()
        order.append(submitted[offer["job_id"]])

    assert order == ["high", "mid-a", "mid-b", "low"]


async def test_the_queue_check_says_whether_a_job_could_run_on_the_worker(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1", labels={"team": "nlp"})
    assert (await agent.queue_check()).json() == {"has_jobs": False}

    first = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await fleet.submit(worker_labels={"team": "nlp"})

    assert (await agent.queue_check()).json() == {"has_jobs": True}
    await agent.finish(offer)
    assert (await fleet.job(first["id"]))["status"] == "completed"
    second = await agent.next_offer()
    await agent.run(second)
    await agent.finish(second)
    assert (await agent.queue_check()).json() == {"has_jobs": False}


async def test_a_drained_worker_is_told_there_are_no_jobs(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    busy = await fleet.submit()
    await agent.run(await agent.next_offer())
    await fleet.submit()

    await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")

    assert (await fleet.job(busy["id"]))["status"] == "running"
    assert (await agent.queue_check()).json() == {"has_jobs": False}


async def _waiting_reasons(fleet: Fleet, job_id: str) -> dict[str, list[str]]:
    waiting = (await fleet.job(job_id))["waiting"]
    return {row["name"]: row["reasons"] for row in waiting["workers"]}


async def test_a_waiting_job_explains_why_each_worker_does_not_take_it(fleet: Fleet) -> None:
    wanted = {"gpu_type": "h100"}
    wrong_label = await fleet.online_worker("wrong-label", gpu_count=4, labels={"gpu_type": "a100"})
    too_small = await fleet.online_worker("too-small", gpu_count=1, labels=wanted)
    busy: Agent = await fleet.online_worker("busy", gpu_count=2, labels={**wanted, "slot": "b"})
    draining = await fleet.online_worker("draining", gpu_count=2, labels=wanted)
    offline = await fleet.online_worker("offline", gpu_count=2, labels=wanted)
    blocker = await fleet.submit(worker_labels={"slot": "b"})
    await fleet.admin.post(f"/api/admin/workers/{draining.id}/drain")
    await offline.disconnect()

    job = await fleet.submit(gpu_count=2, worker_labels=wanted)

    detail = await fleet.job(job["id"])
    assert detail["status"] == "queued"
    assert detail["waiting"]["summary"].startswith("every worker that could run it is busy")
    reasons = await _waiting_reasons(fleet, job["id"])
    assert reasons["wrong-label"] == ["label gpu_type='a100' does not match 'h100'"]
    assert reasons["too-small"] == ["has 1 GPU(s), the job needs 2"]
    assert reasons["busy"] == [f"is busy with job {blocker['id']}"]
    assert reasons["draining"] == ["is draining"]
    assert reasons["offline"] == ["is offline"]
    assert {wrong_label.id, too_small.id, busy.id} <= {
        row["worker_id"] for row in detail["waiting"]["workers"]
    }


async def test_a_running_job_has_no_waiting_explanation(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    await agent.run(await agent.next_offer())

    assert (await fleet.job(job["id"]))["waiting"] is None


async def test_following_the_logs_of_a_finished_job_replays_them_and_ends(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.logs(job["id"], [{"stream": "stdout", "text": "loss 0.1"}])
    await agent.finish(offer)

    answer = await fleet.admin.get(f"/api/queue/{job['id']}/logs", params={"follow": "true"})

    assert answer.headers["content-type"].startswith("text/event-stream")
    frames = answer.text.strip().split("\n\n")
    assert frames[0].startswith("event: log\nid: ")
    assert '"text":"loss 0.1"' in frames[0]
    assert frames[-1] == 'event: end\ndata: {"type":"end","status":"completed"}'


@both_databases
async def test_concurrent_submissions_never_offer_one_worker_two_jobs(fleet: Fleet) -> None:
    agent = await fleet.online_worker("only-one")
    jobs = await asyncio.gather(*(fleet.submit() for _ in range(12)))
    details = [await fleet.job(j["id"]) for j in jobs]
    offered = [d for d in details if d["status"] == "offered"]
    assert len(offered) == 1
    assert all(d["status"] == "queued" for d in details if d is not offered[0])
    worker = (await fleet.admin.get(f"/api/admin/workers/{agent.id}")).json()
    assert worker["status"] == "busy" and worker["current_job_id"] == offered[0]["id"]
    live = [a for d in details for a in d["attempt_history"] if a["status"] == "offered"]
    assert [a["id"] for a in live] == [offered[0]["current_attempt_id"]]


@both_databases
async def test_submits_racing_reports_and_heartbeats_all_succeed(fleet: Fleet) -> None:
    """Submits (job, then worker) race reports and heartbeats (worker, then job): on
    PostgreSQL, opposite lock orders would deadlock and answer 500."""
    agents = [await fleet.online_worker(f"gpu-{n}") for n in range(4)]
    total = 40
    done: list[str] = []
    finished: set[str] = set()

    async def work(agent: Agent) -> None:
        while len(done) < total:
            assert agent.stream is not None
            try:
                offer = await agent.stream.expect("job_submit", within=1.0)
            except TimeoutError:
                continue  # nothing for this one now; the others may be taking the rest
            if offer["attempt_id"] in finished:
                # The stream sent the offer again before its acknowledgement landed (resends
                # run on the real clock; a loaded machine is slow to acknowledge): that
                # attempt is done already, as an agent that ignores a repeated offer knows.
                # Another attempt of a done job would still fail below.
                continue
            await agent.run(offer)
            beat = await agent.heartbeat(current_job_id=offer["job_id"])
            assert beat.status_code == 200, beat.text
            await agent.finish(offer)
            done.append(offer["job_id"])
            finished.add(offer["attempt_id"])

    async def submit_lane(count: int) -> list[dict[str, Any]]:
        return [await fleet.submit() for _ in range(count)]  # one after another, as jobs end

    workers = [asyncio.create_task(work(agent)) for agent in agents]
    lanes = await asyncio.gather(*(submit_lane(total // 4) for _ in range(4)))
    jobs = [job for lane in lanes for job in lane]
    await asyncio.wait_for(asyncio.gather(*workers), timeout=60)

    assert sorted(done) == sorted(j["id"] for j in jobs)
    statuses = {(await fleet.job(j["id"]))["status"] for j in jobs}
    assert statuses == {"completed"}


@both_databases
async def test_a_freed_worker_finds_its_job_behind_a_deep_queue_of_jobs_it_cannot_run(
    fleet: Fleet,
) -> None:
    """Past the first page of the queue, a worker reads only the jobs its labels satisfy (an
    index on the jobs' label requirements): exact labels, none, or glob patterns."""
    await fleet.create_worker("elsewhere", labels={"pool": "elsewhere"})  # admits those jobs
    agent = await fleet.create_worker("here", labels={"pool": "here"}, worker_type="persistent")
    for _ in range(40):  # twice the head a freed worker reads as it is (fair_queue's _HEAD)
        await fleet.submit(worker_labels={"pool": "elsewhere"})
    exact = await fleet.submit(worker_labels={"pool": "here"})
    glob = await fleet.submit(worker_labels={"pool": "h*"})
    anywhere = await fleet.submit()

    await agent.connect(gpu_count=1)
    taken = []
    for _ in range(3):
        offer = await agent.next_offer()
        taken.append(offer["job_id"])
        await agent.run(offer)
        await agent.finish(offer)

    assert sorted(taken) == sorted([exact["id"], glob["id"], anywhere["id"]])
    assert (await agent.queue_check()).json()["has_jobs"] is False


async def test_a_job_reaches_the_one_fitting_idle_worker_behind_many_that_do_not_fit(
    fleet: Fleet,
) -> None:
    """Workers are read in offer order a few at a time, then in growing pages: the fitting
    one, 25th in that order (after 24 with fewer GPUs and the wrong label), is still found,
    both by submit's "could any worker run this" check and by the dispatch."""
    for n in range(24):
        await fleet.online_worker(f"small-{n:02}", gpu_count=1, labels={"pool": "a"})
    wanted = await fleet.online_worker("big", gpu_count=2, labels={"pool": "b"})

    job = await fleet.submit(worker_labels={"pool": "b"})

    offer = await wanted.next_offer()
    assert offer["job_id"] == job["id"]
    assert (await fleet.job(job["id"]))["worker_id"] == wanted.id


@both_databases
async def test_the_sweep_asks_the_queue_once_per_shape_of_idle_worker(fleet: Fleet) -> None:
    """The health sweep's safety net offers jobs whose dispatch was missed (here: rows
    written straight into the queue), and once one idle worker of a shape finds nothing it
    can run, the other workers of that shape are not asked again."""
    agents = [await fleet.online_worker(f"alike-{n}", labels={"pool": "a"}) for n in range(5)]
    await fleet.create_worker("elsewhere", labels={"pool": "elsewhere"})  # admits those jobs
    for _ in range(3):
        await fleet.submit(worker_labels={"pool": "elsewhere"})  # queued: nobody can run them
    missed = [await _queue_without_dispatch(fleet, {"pool": "a"}) for _ in range(2)]
    reads: list[str] = []

    def capture(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "FROM jobs" in statement and "ORDER BY" in statement:
            reads.append(statement)

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        assert await dispatch.dispatch_all(fleet.ctx) == 2
    finally:
        event.remove(engine, "before_cursor_execute", capture)

    offered = {(await fleet.job(job_id))["worker_id"] for job_id in missed}
    assert len(offered) == 2 and offered <= {a.id for a in agents}
    # two workers read the head of the queue and took a job; a third read it and found
    # nothing it can run: the last two were not asked (without the grouping: 5 reads)
    assert len(reads) == 3, reads


async def _queue_without_dispatch(fleet: Fleet, labels: dict[str, str]) -> str:
    job_id = new_id("j")
    now = fleet.ctx.clock()
    async with fleet.ctx.store.write() as q:
        await q.insert_job(
            {
                "id": job_id,
                "status": "queued",
                "config": {"command": ["true"]},
                "target": "auto",
                "worker_labels": labels,
                "match_key": match_key(labels),
                "gpu_count": 1,
                "priority": 0,
                "max_retries": 0,
                "retry_on": ["lost"],
                "attempts": 0,
                "submitted_by": "test",
                "created_at": now,
                "updated_at": now,
            }
        )
    return job_id


async def test_the_workers_list_names_queued_jobs_no_registered_worker_can_run(
    fleet: Fleet,
) -> None:
    await fleet.online_worker("gpu-1", labels={"team": "cv"})
    stranded = await fleet.submit(gpu_count=2, worker_labels={"team": "nlp"})
    runnable = await fleet.submit(worker_labels={"team": "cv"})  # offered to gpu-1 at once
    waits = await fleet.submit(worker_labels={"team": "cv"})  # waits for gpu-1, which fits

    listed = (await fleet.admin.get("/api/admin/workers")).json()["unmatched_jobs"]
    waiting = (await fleet.job(stranded["id"]))["waiting"]
    assert listed == [
        {
            "job_id": stranded["id"],
            **{k: waiting[k] for k in ("summary", "summaries", "code", "params")},
        }
    ]
    assert listed[0]["summary"].startswith("no remote worker registered has 2 GPUs and team=nlp")
    for job in (runnable, waits):
        assert job["id"] not in str(listed)
    filtered = (await fleet.admin.get("/api/admin/workers", params={"status": "offline"})).json()
    assert filtered["workers"] == [] and filtered["unmatched_jobs"] == listed
