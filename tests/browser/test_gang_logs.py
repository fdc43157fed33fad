"""A multi-node job's log on its page (#35): a tab a node (All, Node 0, Node 1…); a tab
shows that node's lines only, and the live log follows the tab picked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in
from tests.e2e.conftest import ServerProcess, serving
from tests.e2e.fake_gang import running_gang


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of the module's own: only the first gang in the queue holds workers, and
    the shared server's other modules queue gangs of their own."""
    yield from serving(tmp_path_factory.mktemp("gang-logs"))


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
