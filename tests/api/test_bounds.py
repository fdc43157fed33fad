"""Bounded everything (#31.6, #31.9): progress at most 16 KiB and left out of lists, a log
batch at most 1 MiB, a log page at most 4 MiB whatever `limit` says, event streams of one key
bounded (the oldest closed), artifact paths without bidi controls or `~`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.domain import bounds
from tests.api.conftest import Agent, EventStream, Fleet

KIB = 1024


def progress_of(size: int, step: int = 7) -> dict[str, Any]:
    """A progress object whose canonical JSON is `size` bytes."""
    body: dict[str, Any] = {"step": step, "total": 100, "metrics": {"loss": 0.5}, "note": ""}
    body["note"] = "x" * (size - bounds.json_size(body))
    assert bounds.json_size(body) == size
    return body


async def running(fleet: Fleet, agent: Agent) -> dict[str, Any]:
    await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    return offer


async def report(agent: Agent, offer: dict[str, Any], progress: dict[str, Any]) -> httpx.Response:
    return await agent.report(
        offer["job_id"], "running", attempt_id=offer["attempt_id"], progress=progress
    )


async def test_progress_over_16_kib_is_refused_naming_the_limit_and_nothing_is_stored(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running(fleet, agent)
    fits = progress_of(15 * KIB, step=3)
    assert (await report(agent, offer, fits)).status_code == 200

    answer = await report(agent, offer, progress_of(17 * KIB, step=9))
    final = await agent.report(
        offer["job_id"],
        "completed",
        attempt_id=offer["attempt_id"],
        exit_code=0,
        progress=progress_of(17 * KIB, step=10),
    )

    assert answer.status_code == 413, answer.text
    assert "16384 bytes" in answer.json()["detail"]
    assert final.status_code == 413, final.text
    job = (await fleet.admin.get(f"/api/queue/{offer['job_id']}")).json()
    assert (job["status"], job["progress"]) == ("running", fits)
    history = (await fleet.admin.get(f"/api/queue/{offer['job_id']}/progress")).json()
    assert history["step"] == 3
    assert [p[0] for s in history["series"] for p in s["points"]] == [3]


async def test_lists_carry_a_small_summary_of_progress_and_one_job_the_whole(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    ids = []
    for step in range(10):
        offer = await running(fleet, agent)
        assert (await report(agent, offer, progress_of(15 * KIB, step=step))).status_code == 200
        await agent.finish(offer, exit_code=0)
        ids.append(offer["job_id"])

    listed = await fleet.admin.get("/api/queue", params={"limit": 50})
    one = (await fleet.admin.get(f"/api/queue/{ids[0]}")).json()

    assert listed.status_code == 200
    assert len(listed.content) < 20 * KIB  # the whole progress would be over 150 KiB
    progress = {job["id"]: job["progress"] for job in listed.json()["jobs"]}
    assert progress == {job_id: {"step": n, "total": 100} for n, job_id in enumerate(ids)}
    assert one["progress"] == progress_of(15 * KIB, step=0)


async def test_a_log_batch_over_1_mib_is_refused_naming_the_limit_and_nothing_is_stored(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running(fleet, agent)
    line = {"stream": "stdout", "text": "y" * 65_536}

    over = await agent.logs(offer["job_id"], [line] * 17, attempt_id=offer["attempt_id"])
    fits = await agent.logs(offer["job_id"], [line] * 16, attempt_id=offer["attempt_id"])

    assert over.status_code == 413, over.text
    assert "1048576 bytes" in over.json()["detail"]
    assert fits.status_code == 200, fits.text
    page = (await fleet.admin.get(f"/api/queue/{offer['job_id']}/logs")).json()
    assert len(page["lines"]) == 16


async def test_a_log_page_stops_at_4_mib_whatever_the_limit_and_its_cursor_reads_every_line(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running(fleet, agent)
    texts = [f"{n:04d}" + "z" * (64 * KIB - 4) for n in range(540)]
    for start in range(0, len(texts), 15):
        batch = [{"stream": "stdout", "text": t} for t in texts[start : start + 15]]
        answer = await agent.logs(offer["job_id"], batch, attempt_id=offer["attempt_id"])
        assert answer.status_code == 200, answer.text
    url = f"/api/queue/{offer['job_id']}/logs"

    read: list[str] = []
    params: dict[str, Any] = {"after": 0, "limit": 5000}
    pages = 0
    while True:
        answer = await fleet.admin.get(url, params=params)
        assert answer.status_code == 200, answer.text
        assert len(answer.content) <= bounds.MAX_LOG_PAGE_BYTES + 64 * KIB
        page = answer.json()
        read += [line["text"] for line in page["lines"]]
        pages += 1
        if not page["more"]:
            break
        params["after"] = page["next_after"]
    back: list[str] = []
    before: int | None = 2**62  # past every line: the newest lines first
    while before is not None:
        answer = await fleet.admin.get(url, params={"before": before, "limit": 5000})
        assert len(answer.content) <= bounds.MAX_LOG_PAGE_BYTES + 64 * KIB
        page = answer.json()
        back = [line["text"] for line in page["lines"]] + back
        before = page["next_before"]
    tail = (await fleet.admin.get(url, params={"tail": 100, "limit": 5000})).json()

    assert read == texts
    assert pages >= 9
    assert back == texts
    assert [line["text"] for line in tail["lines"]] == texts[440:504]  # 64 lines of 64 KiB
    assert tail["more"] is True


async def test_a_small_log_page_says_when_nothing_more_follows(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running(fleet, agent)
    lines = [{"stream": "stdout", "text": f"line {n}"} for n in range(5)]
    await agent.logs(offer["job_id"], lines, attempt_id=offer["attempt_id"])
    url = f"/api/queue/{offer['job_id']}/logs"

    first = (await fleet.admin.get(url, params={"limit": 3})).json()
    rest = (await fleet.admin.get(url, params={"limit": 3, "after": first["next_after"]})).json()

    assert (len(first["lines"]), first["more"]) == (3, True)
    assert (len(rest["lines"]), rest["more"]) == (2, False)


async def _events(fleet: Fleet, key: str) -> EventStream:
    stream = await fleet.open_sse("/api/events", "", {"X-API-Key": key})
    assert stream.status == 200
    assert (await stream.next())["type"] == "hello"  # type: ignore[index]
    return stream


async def test_one_stream_over_the_keys_bound_closes_its_oldest_and_no_other_keys(
    fleet: Fleet,
) -> None:
    key = (await fleet.mint_key("queue.read", name="many-tabs"))["key"]
    other = await _events(fleet, (await fleet.mint_key("queue.read", name="other"))["key"])
    streams = [await _events(fleet, key) for _ in range(bounds.MAX_STREAMS_PER_KEY)]
    job = await fleet.submit()

    follow = await fleet.open_sse(f"/api/queue/{job['id']}/logs", "follow=true", {"X-API-Key": key})

    assert follow.status == 200
    assert await streams[0].wait_closed()
    await fleet.submit()  # a change every stream still open hears
    for stream in [*streams[1:], other]:
        assert (await stream.expect("jobs"))["type"] == "jobs"
    newest = await _events(fleet, key)  # and one more closes the next oldest
    assert await streams[1].wait_closed()
    await fleet.submit()
    assert (await newest.expect("jobs"))["type"] == "jobs"


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("output/\u202egnp.exe", "bidi"),
        ("output/model\u200f.bin", "bidi"),
        ("output/zero\u200bwidth", "invisible"),
        ("~/model.bin", "'~'"),
        ("output/~root/model.bin", "'~'"),
    ],
)
async def test_an_artifact_path_with_bidi_controls_or_a_tilde_is_refused_saying_why(
    fleet: Fleet, path: str, said: str
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running(fleet, agent)

    answer = await fleet.http.post(
        f"/api/workers/job/{offer['job_id']}/upload",
        json={"attempt_id": offer["attempt_id"], "path": path, "size": 1, "sha256": "0" * 64},
        headers=agent.headers,
    )

    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"]
    listed = (await fleet.admin.get(f"/api/queue/{offer['job_id']}/artifacts")).json()
    assert listed["artifacts"] == []
