"""A job's log read back in bounded pages (after, before, tail, per attempt) and downloaded
whole as streamed text (#15.2)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Fleet


async def _two_attempts(fleet: Fleet) -> tuple[dict[str, Any], list[str], list[str]]:
    """A job whose first attempt printed 5 lines and failed, and whose second printed 7."""
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=1, retry_on=["failed"])
    attempts = []
    for count in (5, 7):
        offer = await agent.next_offer()
        await agent.run(offer)
        n = len(attempts) + 1
        lines = [{"stream": "stdout", "text": f"a{n} line {i}"} for i in range(count)]
        answer = await agent.logs(job["id"], lines, attempt_id=offer["attempt_id"])
        assert answer.status_code == 200, answer.text
        await agent.finish(offer, "failed" if n == 1 else "completed", exit_code=n - 1)
        attempts.append(offer["attempt_id"])
    texts = [f"a1 line {i}" for i in range(5)] + [f"a2 line {i}" for i in range(7)]
    return job, attempts, texts


async def _page(fleet: Fleet, job_id: str, **params: Any) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/logs", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_the_tail_then_pages_before_it_read_the_whole_log_back_in_order(
    fleet: Fleet,
) -> None:
    job, _attempts, texts = await _two_attempts(fleet)

    tail = await _page(fleet, job["id"], tail=3, limit=3)
    pages = [[line["text"] for line in tail["lines"]]]
    before = tail["next_before"]
    while before is not None:
        page = await _page(fleet, job["id"], before=before, limit=4)
        assert len(page["lines"]) <= 4
        pages.insert(0, [line["text"] for line in page["lines"]])
        before = page["next_before"]

    assert pages[-1] == texts[-3:]
    assert [text for page in pages for text in page] == texts
    assert tail["next_after"] == tail["lines"][-1]["seq"]
    assert (await _page(fleet, job["id"], after=tail["next_after"]))["lines"] == []


async def test_a_page_can_hold_one_attempts_lines_only(fleet: Fleet) -> None:
    job, attempts, texts = await _two_attempts(fleet)

    first = await _page(fleet, job["id"], attempt_id=attempts[0])
    second_tail = await _page(fleet, job["id"], attempt_id=attempts[1], tail=2)
    earlier = await _page(
        fleet, job["id"], attempt_id=attempts[1], before=second_tail["next_before"]
    )

    assert [line["text"] for line in first["lines"]] == texts[:5]
    assert first["next_before"] is None
    assert [line["text"] for line in second_tail["lines"]] == texts[-2:]
    assert [line["text"] for line in earlier["lines"]] == texts[5:-2]
    assert earlier["next_before"] is None  # the attempt's first line, though attempt 1 precedes


async def test_a_tail_longer_than_the_log_is_the_whole_log(fleet: Fleet) -> None:
    job, _attempts, texts = await _two_attempts(fleet)

    page = await _page(fleet, job["id"], tail=1_000_000, limit=5000)

    assert [line["text"] for line in page["lines"]] == texts
    assert page["next_before"] is None


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 5001}, "limit"),
        ({"before": 0}, "before"),
        ({"before": "abc"}, "before"),
        ({"before": 2**63}, "before"),
        ({"after": -1}, "after"),
        ({"tail": -1}, "tail"),
        ({"tail": 5, "before": 10}, "without after or before"),
        ({"tail": 5, "after": 10}, "without after or before"),
        ({"after": 10, "before": 10}, "must be greater than after"),
        ({"attempt_id": ""}, "attempt_id"),
    ],
)
async def test_bad_cursors_and_page_sizes_are_refused_saying_what_to_fix(
    fleet: Fleet, params: dict[str, Any], says: str
) -> None:
    job = await fleet.submit()

    answer = await fleet.admin.get(f"/api/queue/{job['id']}/logs", params=params)

    assert answer.status_code == 422, answer.text
    assert says in answer.text


async def test_another_jobs_attempt_or_an_unknown_job_is_not_found(fleet: Fleet) -> None:
    _job, attempts, _texts = await _two_attempts(fleet)
    other = await fleet.submit()

    wrong = await fleet.admin.get(
        f"/api/queue/{other['id']}/logs", params={"attempt_id": attempts[0]}
    )
    missing = await fleet.admin.get("/api/queue/j_nope/logs", params={"tail": 10})
    download = await fleet.admin.get("/api/queue/j_nope/logs/download")

    assert wrong.status_code == 404
    assert f"has no attempt {attempts[0]}" in wrong.json()["detail"]
    assert missing.status_code == 404
    assert download.status_code == 404
    assert "no job j_nope" in download.json()["detail"]


async def test_download_streams_every_line_under_its_attempts_header(fleet: Fleet) -> None:
    job, attempts, texts = await _two_attempts(fleet)

    async with fleet.admin.stream("GET", f"/api/queue/{job['id']}/logs/download") as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        disposition = answer.headers["content-disposition"]
        body = (await answer.aread()).decode()

    assert disposition == f'attachment; filename="{job["id"]}.log"'
    lines = body.splitlines()
    assert [line for line in lines if line and not line.startswith("==>")] == texts
    headers = [line for line in lines if line.startswith("==>")]
    assert len(headers) == 2
    assert headers[0].startswith(f"==> attempt 1 ({attempts[0]}) on gpu-1 (")
    assert headers[1].startswith(f"==> attempt 2 ({attempts[1]}) on gpu-1 (")
    assert lines.index(headers[1]) == lines.index("a2 line 0") - 1


async def test_download_of_a_long_log_holds_every_line_once(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 5000 in production; of 7 here, so the page seams are crossed many times."""
    from gpufleet.server.services import joblogs

    monkeypatch.setattr(joblogs, "DOWNLOAD_PAGE", 7)
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    texts = [f"line {i}" for i in range(100)]
    await agent.logs(job["id"], [{"text": t} for t in texts], attempt_id=offer["attempt_id"])

    answer = await fleet.admin.get(f"/api/queue/{job['id']}/logs/download")

    lines = answer.text.splitlines()
    assert lines[0].startswith("==> attempt 1")
    assert lines[1:] == texts


async def test_cursors_at_their_bounds_answer_an_empty_or_whole_page(fleet: Fleet) -> None:
    job, _attempts, texts = await _two_attempts(fleet)

    past = await _page(fleet, job["id"], after=2**62)
    before_all = await _page(fleet, job["id"], before=1)
    before_end = await _page(fleet, job["id"], before=2**62, limit=5000)
    longest = await _page(fleet, job["id"], tail=2**31)

    assert past["lines"] == [] and past["next_after"] == 2**62
    assert before_all["lines"] == [] and before_all["next_before"] is None
    assert [line["text"] for line in before_end["lines"]] == texts
    assert [line["text"] for line in longest["lines"]] == texts


async def _searched(fleet: Fleet) -> tuple[str, list[str]]:
    """A job whose one attempt printed lines holding LIKE's and regular expressions' signs."""
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    texts = [
        "step 1 loss 0.9",
        "step 2 LOSS 0.8 (50% done)",
        "step 3 loss_x 0.7 [a-z]+ .*",
        "warning: 100%_ under_score",
        "back\\slash and \x1b[31mred\x1b[0m",
        "nothing here",
    ]
    lines = [{"stream": "stdout", "text": t} for t in texts]
    answer = await agent.logs(job["id"], lines, attempt_id=offer["attempt_id"])
    assert answer.status_code == 200, answer.text
    return job["id"], texts


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("loss", [0, 1, 2]),  # ignoring case
        ("50%", [1]),  # `%` is itself, not any text
        ("%_", [3]),
        ("loss_", [2]),  # `_` is itself, not any one character
        ("[a-z]+ .*", [2]),  # a regular expression's signs are themselves too
        ("back\\slash", [4]),
        ("\x1b[31mred", [4]),
        ("\ufffd", []),
    ],
)
async def test_q_finds_the_lines_holding_the_text_as_typed(
    fleet: Fleet, q: str, expected: list[int]
) -> None:
    job_id, texts = await _searched(fleet)

    page = await _page(fleet, job_id, q=q)

    assert [line["text"] for line in page["lines"]] == [texts[i] for i in expected]


async def test_a_search_pages_back_from_its_tail_like_the_log(fleet: Fleet) -> None:
    job_id, texts = await _searched(fleet)

    tail = await _page(fleet, job_id, q="loss", tail=1)
    earlier = await _page(fleet, job_id, q="loss", before=tail["next_before"])

    assert [line["text"] for line in tail["lines"]] == [texts[2]]
    assert [line["text"] for line in earlier["lines"]] == texts[:2]
    assert earlier["next_before"] is None


@pytest.mark.parametrize(
    ("q", "says"),
    [
        ("a\x00b", "holds a NUL character (%00)"),  # the door's word, before the route
        ("x" * 257, "q is 257 characters; search for at most 256"),
    ],
)
async def test_a_search_for_nul_or_too_long_a_text_is_refused_saying_what_to_fix(
    fleet: Fleet, q: str, says: str
) -> None:
    job_id, _texts = await _searched(fleet)

    answer = await fleet.admin.get(f"/api/queue/{job_id}/logs", params={"q": q})
    followed = await fleet.admin.get(
        f"/api/queue/{job_id}/logs", params={"q": "loss", "follow": "true"}
    )

    assert answer.status_code == 422, answer.text
    assert says in answer.json()["detail"]
    assert followed.status_code == 422
    assert "give it without follow=true" in followed.json()["detail"]


async def test_a_lone_surrogate_in_q_is_sought_as_the_replacement_character(
    fleet: Fleet,
) -> None:
    job_id, _texts = await _searched(fleet)

    answer = await fleet.admin.get(f"/api/queue/{job_id}/logs?q=%ED%A0%80loss")

    assert answer.status_code == 200, answer.text
    assert answer.json()["lines"] == []


async def test_a_key_that_may_not_read_logs_may_not_search_them(fleet: Fleet) -> None:
    job_id, _texts = await _searched(fleet)
    key = await fleet.mint_key("admin.workers")

    answer = await fleet.http.get(
        f"/api/queue/{job_id}/logs", params={"q": "loss"}, headers={"X-API-Key": key["key"]}
    )

    assert answer.status_code == 403
    assert "loss" not in answer.text
