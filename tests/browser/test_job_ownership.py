"""Who may act on a job, in Chromium (#31): the Queue and the job page show Cancel only to
those who may take it (the job's `actions`), and a lead of the job's team who clicks it
cancels it, checked through the API."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in
from tests.browser.test_sharing import admin_call, as_key, job, sign_out, user_with_key
from tests.e2e.conftest import ServerProcess, unique

READ_SUBMIT = ("queue.read", "queue.submit")


def queued_job(server: ServerProcess, key: str) -> str:
    """A job of the key's user that waits for a label no worker has."""
    with as_key(server, key) as owner:
        resp = owner.post(
            "/api/queue/submit",
            json={"config": {"command": ["true"]}, "worker_labels": {"pool": unique("none")}},
        )
    assert resp.status_code == 201, resp.text
    assert resp.json()["status"] == "queued"
    job_id: str = resp.json()["id"]
    return job_id


def test_cancel_shows_only_to_those_who_may_and_a_lead_of_the_team_cancels_from_the_queue(
    server: ServerProcess, page: Page
) -> None:
    team, other = unique("nlp"), unique("vision")
    for name in (team, other):
        admin_call(server, "POST", "/api/teams", json={"name": name})
    _, alice_key = user_with_key(server, "researcher", *READ_SUBMIT, team=team)
    _, bob_key = user_with_key(server, "researcher", *READ_SUBMIT, team=other)
    _, lena_key = user_with_key(server, "lead", *READ_SUBMIT, team=team)
    job_id = queued_job(server, alice_key)

    sign_in(page, bob_key, then="/queue")  # another team's researcher: may not
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(row.locator('[data-label="Status"]')).to_have_text("queued")
    expect(row.locator("[data-action=cancel]")).to_have_count(0)
    page.goto(f"/queue/{job_id}")
    expect(page.locator("#status")).to_have_text("queued")
    expect(page.locator("#facts")).to_contain_text(team)  # the page has drawn the job
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#artifacts-pin")).to_be_hidden()
    sign_out(page)

    sign_in(page, lena_key, then="/queue")  # a lead of the job's team: may
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    row.locator("[data-action=cancel]").click()
    page.click("#confirm-yes")

    expect(row.locator('[data-label="Status"]')).to_have_text("cancelled")
    assert job(server, job_id)["status"] == "cancelled"


def test_the_owner_cancels_their_own_job_from_its_page(server: ServerProcess, page: Page) -> None:
    _, vera_key = user_with_key(server, "viewer", *READ_SUBMIT)
    with as_key(server, vera_key) as vera:  # a viewer's job is held for approval
        resp = vera.post("/api/queue/submit", json={"config": {"command": ["true"]}})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]

    sign_in(page, vera_key, then=f"/queue/{job_id}")
    expect(page.locator("#status")).to_have_text("waiting for approval")
    expect(page.locator("#approve")).to_be_hidden()  # her own: never hers to approve
    page.click("#cancel")
    page.click("#confirm-yes")

    expect(page.locator("#status")).to_have_text("cancelled")
    assert job(server, job_id)["status"] == "cancelled"


SIZES = [{"width": 1440, "height": 900}, {"width": 390, "height": 844}]


def ended_job(server: ServerProcess, key: str) -> str:
    job_id = queued_job(server, key)
    with as_key(server, key) as owner:
        assert owner.post(f"/api/queue/{job_id}/cancel").status_code == 200
    return job_id


def fits(page: Page) -> None:
    """The page as it is, measured at each of SIZES (back at the first after)."""
    for size in (*SIZES[1:], SIZES[0]):
        page.set_viewport_size(size)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{page.url} is {overflow} px too wide at {size['width']} px"


def test_the_owner_edits_and_re_runs_a_job_and_another_teams_researcher_cannot(
    server: ServerProcess, page: Page
) -> None:
    """Bob's refusals at a phone's width, Alice's re-run at 1440 px, each page she sees
    measured at both: the flow once, not once a width."""
    team, other = unique("nlp"), unique("vision")
    for name in (team, other):
        admin_call(server, "POST", "/api/teams", json={"name": name})
    _, alice_key = user_with_key(server, "researcher", *READ_SUBMIT, team=team)
    _, bob_key = user_with_key(server, "researcher", *READ_SUBMIT, team=other)
    job_id = ended_job(server, alice_key)
    page.set_viewport_size(SIZES[1])

    sign_in(page, bob_key, then=f"/queue/{job_id}")  # another team's: no button, and the
    expect(page.locator("#facts")).to_contain_text(team)  # editor's submit is refused
    expect(page.locator("#edit-rerun")).to_be_hidden()
    page.goto(f"/train?rerun={job_id}")
    expect(page.locator("#config-json")).to_have_value(re.compile('"true"'))
    page.click("#submit")
    expect(page.locator("#error")).to_contain_text("only its owner, a lead of its team")
    assert job(server, job_id)["rerun_as"] == []
    sign_out(page)

    page.set_viewport_size(SIZES[0])
    sign_in(page, alice_key, then=f"/queue/{job_id}")
    page.click("#edit-rerun")
    page.wait_for_url(f"**/train?rerun={job_id}")
    expect(page.locator("#rerun-of")).to_contain_text(f"Editing a re-run of job {job_id}")
    expect(page.locator("#submit")).to_have_text("Re-run with these changes")
    labels = page.locator("#labels")
    expect(labels).to_have_value(re.compile(r"^pool=none"))
    fits(page)
    page.fill("#config-json", '{"command": ["true", "--edited"], "env": {"HF": {"secret": 1}}}')
    page.click("#submit")  # a hostile edit: refused, saying what to fix, and no job made
    expect(page.locator("#error")).to_contain_text("env")
    assert job(server, job_id)["rerun_as"] == []
    page.fill("#config-json", '{"command": ["true", "--edited"]}')
    page.fill("#labels", "pool=edited")
    page.click("#submit")

    page.wait_for_url(re.compile(r"/queue/j_"))
    new_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#facts")).to_contain_text(f"Re-run of{job_id}")
    new = job(server, new_id)
    assert new["rerun_of"] == job_id and new["config"] == {"command": ["true", "--edited"]}
    assert new["worker_labels"] == {"pool": "edited"}
    assert job(server, job_id)["rerun_as"] == [new_id]
    fits(page)
