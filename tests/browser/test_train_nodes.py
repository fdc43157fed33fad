"""The Train page's Nodes field (multi-node jobs, #35): what is typed goes into the config's
`nodes`, a value the config contradicts is refused beside the field, and the job's page says
what the gang waits for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in, train_ready
from tests.browser.test_first_hour import admin_call
from tests.e2e.conftest import FakeWorker, ServerProcess, serving, unique
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of the module's own: which gang holds depends on the whole queue and its
    policy (only the first gang holds, limits refuse), which the shared server's other
    modules change (a full run once saw no hold in 10 s on it)."""
    yield from serving(tmp_path_factory.mktemp("gangs"))


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
