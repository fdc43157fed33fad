"""Who may act on a job, in Chromium (#31): the Queue and the job page show Cancel only to
those who may take it (the job's `actions`), and a lead of the job's team who clicks it
cancels it, checked through the API."""

from __future__ import annotations

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
