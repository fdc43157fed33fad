"""Multi-node jobs in Chromium (#35). A job's log on its page: a tab a node (All, Node 0,
Node 1…); a tab shows that node's lines only, and the live log follows the tab picked. The
Train page's Nodes field: what is typed goes into the config's `nodes`, a value the config
contradicts is refused beside the field, and the job's page says what the gang waits for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in, train_ready
from tests.browser.test_first_hour import admin_call
from tests.e2e.conftest import FakeWorker, ServerProcess, serving, unique
from tests.e2e.fake_gang import running_gang
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of the module's own (one start for the log tabs and the Nodes field, two
    before): which gang holds workers depends on the whole queue and its policy (only the
    first gang holds, limits refuse), which the shared server's other modules change (a full
    run once saw no hold in 10 s on it). Each test here ends the jobs it made."""
    yield from serving(tmp_path_factory.mktemp("gangs"))


def _shown(page: Page) -> list[str]:
    return [text.rstrip("\n") for text in page.locator("#logs .log-line").all_text_contents()]


def test_the_node_1_tab_shows_node_1s_lines_only_and_follows_them_live(
    server: ServerProcess, page: Page
) -> None:
    gang = running_gang(server)
    try:
        for rank, text in ((0, "n0 first"), (1, "n1 first"), (0, "n0 second")):
            gang.say(rank, text)
        sign_in(page, server.admin_key, then=f"/queue/{gang.job_id}")

        tabs = page.locator("#log-nodes [role=tab]")
        expect(tabs).to_have_text(["All", "Node 0", "Node 1"])
        expect(page.locator("#logs .log-line")).to_have_count(3)
        assert _shown(page) == ["[node 0] n0 first", "[node 1] n1 first", "[node 0] n0 second"]

        page.get_by_role("tab", name="Node 1").click()
        expect(page.get_by_role("tab", name="Node 1")).to_have_attribute("aria-selected", "true")
        expect(page.locator("#logs .log-line")).to_have_count(1)
        assert _shown(page) == ["n1 first"]
        expect(page.locator("#log-state")).to_have_text("following")
        expect(page.locator("#log-download")).to_have_attribute(
            "href", f"/api/queue/{gang.job_id}/logs/download?node=1"
        )

        # Live: node 0's new line never shows on node 1's tab; node 1's do, in order.
        gang.say(0, "n0 live")
        gang.say(1, "n1 live")
        gang.say(1, "n1 last")
        expect(page.locator("#logs .log-line")).to_have_count(3)
        assert _shown(page) == ["n1 first", "n1 live", "n1 last"]

        page.get_by_role("tab", name="All").click()
        expect(page.locator("#logs .log-line")).to_have_count(6)
        assert _shown(page)[-3:] == ["[node 0] n0 live", "[node 1] n1 live", "[node 1] n1 last"]
    finally:
        gang.finish()
        gang.close()


def test_a_one_node_job_has_no_node_tabs(server: ServerProcess, page: Page) -> None:
    with server.admin() as admin:
        job = admin.post("/api/queue/submit", json={"config": {"command": ["true"]}}).json()
    sign_in(page, server.admin_key, then=f"/queue/{job['id']}")
    expect(page.locator("#config")).to_contain_text('"command"')  # the job's answer drawn

    expect(page.locator("#log-nodes")).to_be_hidden()
    with server.admin() as admin:
        admin.post(f"/api/queue/{job['id']}/cancel")


def test_nodes_typed_on_the_train_page_make_a_multi_node_job(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    expect(page.locator("#nodes")).to_have_value("")  # blank: the config's, else 1
    page.fill("#config-json", '{"command": ["python", "train.py"]}')
    page.fill("#labels", f"pool={unique('none')}")
    page.fill("#nodes", "3")
    page.click("#submit")
    page.wait_for_url("**/queue/j_*")

    job = admin_call(server, "GET", f"/api/queue/{page.url.rsplit('/', 1)[1]}")
    assert (job["nodes"], job["config"]["nodes"]) == (3, 3)
    expect(page.get_by_text("waiting for 3 workers that run multi-node jobs")).to_be_visible()
    admin_call(server, "POST", f"/api/queue/{job['id']}/cancel")


def test_nodes_the_config_contradicts_are_refused_beside_the_field(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    page.fill("#config-json", '{"command": ["python", "train.py"], "nodes": 4}')
    page.fill("#nodes", "2")
    page.click("#submit")

    expect(page.locator("#nodes-error")).to_contain_text(
        'Nodes 2 disagrees with the config\'s own "nodes" (4)'
    )
    assert "/train" in page.url  # nothing submitted


def test_the_workers_pages_say_a_worker_is_held_for_a_gang(
    server: ServerProcess, page: Page
) -> None:
    pool = {"pool": unique("gang")}
    worker = FakeWorker(server, unique("held"), labels=pool)
    worker.register(features=["command", "attempts", "gang"])
    worker.connect()
    try:
        job = admin_call(
            server,
            "POST",
            "/api/queue/submit",
            # first in the queue: only the first gang holds workers (docs/jobs.md)
            json={
                "config": {"command": ["true"], "nodes": 2},
                "worker_labels": pool,
                "priority": 1000,
            },
        )
        note = f"held for job {job['id']} (1 of 2 nodes)"
        # The hold comes with the round the worker's stream opening starts, which may end
        # after the page's first read (a full run's loaded machine saw the page first).
        wait_until(
            lambda: (
                admin_call(server, "GET", f"/api/admin/workers/{worker.id}").get("held_note")
                == note
            ),
            timeout=10,
            message=f"worker {worker.id} to be held for job {job['id']}",
        )

        sign_in(page, server.admin_key, then="/workers")
        held = page.get_by_role("link", name=note)
        expect(held).to_be_visible()
        expect(held).to_have_attribute("href", f"/queue/{job['id']}")

        page.goto(f"/workers/{worker.id}")
        expect(page.locator("[data-fact=held]")).to_have_text(note)
    finally:
        worker.close()
        admin_call(server, "POST", f"/api/queue/{job['id']}/cancel")
