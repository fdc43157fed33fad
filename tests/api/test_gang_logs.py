"""A multi-node (gang) job's log kept per node (#35): each node's lines stored as that node's,
fenced by attempt and rank; read back all together (each line saying its node) or one node
at a time (`node=K`: a page, the tail, a search, the live stream, the download)."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gpufleet.store import open_store
from gpufleet.store.tables import UTCDateTime
from tests.api.conftest import Agent, Fleet, both_databases
from tests.api.test_artifact_records import T0, _job, _migrate
from tests.api.test_gang_rendezvous import gang, node_report, start_all

# On PostgreSQL too (`both_databases`): the lines' queries (pages, search, a resend kept
# once), the live stream (NOTIFY) and the migration. Fencing, refusals, permissions and the
# download's rendering are the service's: SQLite alone.


def _lines(*texts: str) -> list[dict[str, str]]:
    return [{"stream": "stdout", "text": text} for text in texts]


async def _send(
    agent: Agent, offer: dict[str, Any], first: int, *texts: str, **body: Any
) -> httpx.Response:
    body.setdefault("node_rank", offer["node_rank"])
    return await agent.logs(
        offer["job_id"], _lines(*texts), attempt_id=offer["attempt_id"], first=first, **body
    )


async def _running_gang(fleet: Fleet) -> tuple[str, list[Agent], list[dict[str, Any]]]:
    """A two-node job running, whose nodes printed in turns: node 0 two lines, node 1 two,
    node 0 one more."""
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    for rank, first, texts in (
        (0, 0, ("n0 a", "n0 b")),
        (1, 0, ("n1 a", "n1 b")),
        (0, 2, ("n0 c",)),
    ):
        answer = await _send(agents[rank], offers[rank], first, *texts)
        assert answer.status_code == 200, answer.text
    return job["id"], agents, offers


async def _page(fleet: Fleet, job_id: str, **params: Any) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/logs", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _said(page: dict[str, Any]) -> list[tuple[int, str]]:
    return [(line["node"], line["text"]) for line in page["lines"]]


@both_databases
async def test_every_nodes_lines_are_kept_as_its_own_and_read_whole_or_a_node_at_a_time(
    fleet: Fleet,
) -> None:
    job_id, _agents, _offers = await _running_gang(fleet)

    whole = await _page(fleet, job_id)
    assert whole["nodes"] == 2
    assert _said(whole) == [
        (0, "n0 a"),
        (0, "n0 b"),
        (1, "n1 a"),
        (1, "n1 b"),
        (0, "n0 c"),
    ]
    assert _said(await _page(fleet, job_id, node=1)) == [(1, "n1 a"), (1, "n1 b")]
    assert _said(await _page(fleet, job_id, node=0, tail=2)) == [(0, "n0 b"), (0, "n0 c")]
    assert _said(await _page(fleet, job_id, node=1, q="B")) == [(1, "n1 b")]
    back = await _page(fleet, job_id, node=0, before=whole["lines"][-1]["seq"], limit=1)
    assert _said(back) == [(0, "n0 b")] and back["next_before"] is not None


@both_databases
async def test_a_node_counts_its_own_lines_so_its_first_batch_and_a_resend_are_kept_once(
    fleet: Fleet,
) -> None:
    job_id, agents, offers = await _running_gang(fleet)

    # Node 1 sends its first batch again (it did not hear the answer): kept once, and node
    # 0's three lines do not make it look sent already.
    assert (await _send(agents[1], offers[1], 0, "n1 a", "n1 b", "n1 c")).status_code == 200

    assert _said(await _page(fleet, job_id, node=1)) == [(1, "n1 a"), (1, "n1 b"), (1, "n1 c")]


async def test_the_download_labels_each_line_with_its_node_or_holds_one_nodes(
    fleet: Fleet,
) -> None:
    job_id, _agents, _offers = await _running_gang(fleet)

    whole = await fleet.admin.get(f"/api/queue/{job_id}/logs/download")
    one = await fleet.admin.get(f"/api/queue/{job_id}/logs/download", params={"node": 1})

    assert whole.status_code == 200 and one.status_code == 200
    body = [line for line in whole.text.splitlines() if line and not line.startswith("==>")]
    assert body == [
        "[node 0] n0 a",
        "[node 0] n0 b",
        "[node 1] n1 a",
        "[node 1] n1 b",
        "[node 0] n0 c",
    ]
    assert [line for line in one.text.splitlines() if line and not line.startswith("==>")] == [
        "n1 a",
        "n1 b",
    ]
    assert ".node1.log" in one.headers["content-disposition"]


@both_databases
async def test_the_live_log_of_one_node_sends_that_nodes_lines_only(fleet: Fleet) -> None:
    job_id, agents, offers = await _running_gang(fleet)
    seen = (await _page(fleet, job_id))["next_after"]
    stream = await fleet.open_sse(
        f"/api/queue/{job_id}/logs",
        f"follow=true&node=1&after={seen}",
        {"Authorization": f"Bearer {fleet.admin_key}"},
    )
    assert stream.status == 200

    await _send(agents[0], offers[0], 3, "n0 live")
    await _send(agents[1], offers[1], 2, "n1 live")
    await node_report(agents[0], offers[0], "completed", exit_code=0)

    texts = []
    while (event := await stream.next()) is not None:
        if "seq" in event:
            texts.append((event["node"], event["text"]))
        elif event.get("type") == "end":
            break
    assert texts == [(1, "n1 live")]


async def test_a_node_speaks_only_as_its_own_rank_and_always_names_it(fleet: Fleet) -> None:
    job_id, agents, offers = await _running_gang(fleet)
    stranger = await fleet.online_worker("stranger")
    await fleet.submit()
    other = await stranger.next_offer()
    await stranger.run(other)

    as_node_0 = await _send(agents[1], offers[1], 2, "forged as node 0", node_rank=0)
    unranked = await agents[1].logs(
        job_id, _lines("no rank"), attempt_id=offers[1]["attempt_id"], first=2
    )
    outsider = await _send(stranger, offers[0], 0, "from another job's worker")
    far = await _send(agents[1], offers[1], 2, "rank out of range", node_rank=7)

    assert as_node_0.status_code == 403, as_node_0.text
    assert "node 1" in as_node_0.json()["detail"]
    assert unranked.status_code == 422 and "node_rank" in unranked.json()["detail"]
    assert outsider.status_code == 403, outsider.text
    assert far.status_code == 403, far.text
    stored = [text for _node, text in _said(await _page(fleet, job_id))]
    assert stored == ["n0 a", "n0 b", "n1 a", "n1 b", "n0 c"]


async def test_a_one_node_jobs_lines_are_node_0s_and_a_rank_past_it_is_refused(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("solo")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)

    plain = await agent.logs(job["id"], _lines("hello"), attempt_id=offer["attempt_id"])
    ranked = await agent.logs(
        job["id"], _lines("as node 1"), attempt_id=offer["attempt_id"], node_rank=1
    )

    assert plain.status_code == 200
    assert ranked.status_code == 422 and "one node" in ranked.json()["detail"]
    page = await _page(fleet, job["id"], node=0)
    assert page["nodes"] == 1 and _said(page) == [(0, "hello")]


async def test_a_failed_nodes_error_ends_with_its_own_last_lines(fleet: Fleet) -> None:
    job_id, agents, offers = await _running_gang(fleet)
    await _send(agents[0], offers[0], 3, "n0 out of memory")
    await _send(agents[1], offers[1], 2, "n1 waiting on the others")

    answer = await node_report(agents[0], offers[0], "failed", exit_code=3)

    assert answer.status_code == 200, answer.text
    error = (await fleet.job(job_id))["error"]
    assert "n0 out of memory" in error and "n1" not in error


async def test_a_node_the_job_lacks_is_refused_saying_which_there_are(fleet: Fleet) -> None:
    job_id, _agents, _offers = await _running_gang(fleet)
    solo = await fleet.submit()
    base = f"/api/queue/{job_id}/logs"

    for params in ({"node": 2}, {"node": 2, "follow": "true"}, {"node": 5, "tail": 10}):
        answer = await fleet.admin.get(base, params=params)
        assert answer.status_code == 422, answer.text
        assert "node must be 0 to 1" in answer.json()["detail"]
    download = await fleet.admin.get(f"{base}/download", params={"node": 2})
    assert download.status_code == 422 and "0 to 1" in download.text
    one = await fleet.admin.get(f"/api/queue/{solo['id']}/logs", params={"node": 1})
    assert one.status_code == 422 and "node must be 0" in one.json()["detail"]
    for bad in ("-1", "one", "1.5"):
        answer = await fleet.admin.get(base, params={"node": bad})
        assert answer.status_code == 422 and "node" in answer.text, answer.text
    missing = await fleet.admin.get("/api/queue/j_nope/logs", params={"node": 0})
    assert missing.status_code == 404


async def test_keys_that_may_not_read_the_queue_read_no_nodes_lines(fleet: Fleet) -> None:
    job_id, agents, _offers = await _running_gang(fleet)
    scoped = await fleet.mint_key("admin.workers")
    as_scoped = {"X-API-Key": scoped["key"]}
    base = f"/api/queue/{job_id}/logs"

    answers = [
        await fleet.http.get(base, params={"node": 1}, headers=as_scoped),
        await fleet.http.get(f"{base}/download", params={"node": 1}, headers=as_scoped),
        # A node's own worker token reads no log, its own job's included.
        await fleet.http.get(base, params={"node": 1}, headers=agents[1].headers),
        await fleet.http.get(base, params={"node": 0}, headers=agents[0].headers),
    ]

    for answer in answers:
        assert answer.status_code in (401, 403), answer.text
        assert "n1 a" not in answer.text and "n0 a" not in answer.text


def _log_columns(sync_conn: Connection) -> set[str]:
    return {c["name"] for c in sa.inspect(sync_conn).get_columns("job_logs")}


@both_databases
async def test_migration_0023_makes_every_earlier_line_node_0s_and_downgrades(
    database_url: str,
) -> None:
    store = await open_store(database_url)
    try:
        await _job(store, "j_old")
        async with store.write() as q:
            await q.insert_logs([_row("a_new", "node 1's", node=1)])
        async with store.engine.begin() as conn:
            await conn.run_sync(_migrate, "0022", down=True)
            assert "node" not in await conn.run_sync(_log_columns)
            old = sa.table(  # job_logs as 0022 left it
                "job_logs",
                *(sa.column(c) for c in ("job_id", "attempt_id", "stream", "text")),
                sa.column("ts", UTCDateTime),
            )
            await conn.execute(sa.insert(old).values(_row("a_old", "from before")))
            await conn.run_sync(_migrate, "head", down=False)
            assert "node" in await conn.run_sync(_log_columns)
        async with store.read() as q:
            lines, _more = await q.read_logs("j_old", 0, 100)
            ones, _more = await q.read_logs("j_old", 0, 100, node=1)
        # The downgrade dropped every rank: each line is node 0's now, as older ones are.
        assert [(line.text, line.node) for line in lines] == [("node 1's", 0), ("from before", 0)]
        assert ones == []
    finally:
        await store.close()


def _row(attempt_id: str, text: str, **node: int) -> dict[str, Any]:
    return {
        "job_id": "j_old",
        "attempt_id": attempt_id,
        "stream": "stdout",
        "text": text,
        "ts": T0,
        **node,
    }
