"""Sharing a fleet in Chromium (#18): a lead approves or rejects a viewer's job from the Queue
panel and the job page; an admin runs teams and users from the Teams page; every key sees the
fleet, read-only, and the fleet over time on the Fleet page (#33). Each click is checked
through the API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.browser.conftest import LAPTOP, PHONE, HeldRequest, screenshot, sign_in, tab_on
from tests.e2e.conftest import ServerProcess, serving, unique
from tests.waiting import wait_until

USAGE_INTERVAL_S = 0.5
WIDE: ViewportSize = {"width": 1440, "height": 900}


@pytest.fixture(scope="module")
def sampling_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An orchestrator whose policy loop samples each team's usage, and whose fleet-history
    loop samples the fleet, twice a second."""
    yield from serving(
        tmp_path_factory.mktemp("sampling"),
        None,
        **{
            "local-gpus": "auto",
            "usage-interval": str(USAGE_INTERVAL_S),
            "fleet-sample-interval": str(USAGE_INTERVAL_S),
        },
    )


@pytest.fixture
def sampling_page(
    browser: Browser, sampling_server: ServerProcess, profiles: dict[str, BrowserContext]
) -> Iterator[Page]:
    yield from tab_on(browser, sampling_server, profiles)


def as_key(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})


def admin_call(server: ServerProcess, method: str, path: str, **kwargs: Any) -> Any:
    with server.admin() as admin:
        resp = admin.request(method, path, **kwargs)
    assert resp.is_success, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp.json()


def user_with_key(
    server: ServerProcess, level: str, *permissions: str, team: str | None = None
) -> tuple[str, str]:
    """A new user at `level` (in `team`), and a key of theirs with `permissions`: (name, key)."""
    name = unique(level)
    admin_call(server, "POST", "/api/users", json={"name": name, "level": level, "team": team})
    minted = admin_call(
        server,
        "POST",
        "/api/admin/api-keys",
        json={"name": f"{name}-key", "permissions": list(permissions), "user": name},
    )
    return name, minted["key"]


def held_job(server: ServerProcess, viewer_key: str) -> str:
    """A viewer's job, held for approval; approved, it waits for a label no worker has."""
    with as_key(server, viewer_key) as viewer:
        resp = viewer.post(
            "/api/queue/submit",
            json={"config": {"model_type": "lora"}, "worker_labels": {"pool": unique("none")}},
        )
    assert resp.status_code == 201, resp.text
    assert resp.json()["status"] == "pending_approval"
    job_id: str = resp.json()["id"]
    return job_id


def job(server: ServerProcess, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = admin_call(server, "GET", f"/api/queue/{job_id}")
    return body


def sign_out(page: Page) -> None:
    page.click("#signout")
    page.wait_for_url("**/signin**")


def test_a_lead_approves_a_viewers_job_in_the_queue_panel_and_it_joins_the_queue(
    server: ServerProcess, page: Page
) -> None:
    # A lead approves the jobs of their team's members; its name short, as the list's width
    # is measured below.
    team = unique("nlp")[:8]
    admin_call(server, "POST", "/api/teams", json={"name": team})
    viewer, viewer_key = user_with_key(server, "viewer", "queue.read", "queue.submit", team=team)
    lead, lead_key = user_with_key(
        server, "lead", "queue.read", "queue.submit", "queue.approve", team=team
    )
    job_id = held_job(server, viewer_key)

    sign_in(page, viewer_key, then="/queue")
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(row.locator('[data-label="Status"]')).to_have_text("waiting for approval")
    expect(row.locator('[data-label="User"]')).to_have_text(viewer)
    expect(page.locator("#me-blocked")).to_have_text("1")
    expect(page.locator("#queue-stats")).to_contain_text("Queue depth")
    expect(page.locator("#approvals-box")).to_be_hidden()  # a viewer's level may not approve
    sign_out(page)

    sign_in(page, lead_key, then="/queue")
    waiting = page.locator(f'#approvals li[data-job="{job_id}"]')
    expect(waiting).to_contain_text(viewer)
    hidden = page.evaluate(
        "(w => w.scrollWidth - w.clientWidth)(document.querySelector('#jobs').parentElement)"
    )
    assert hidden <= 0, (
        f"the job list is {hidden} px too wide for a laptop: its actions scroll away"
    )
    screenshot(page, "queue-approvals")
    waiting.locator("[data-action=approve]").click()

    expect(waiting).to_have_count(0)
    expect(row.locator('[data-label="Status"]')).to_have_text("queued")
    approved = job(server, job_id)
    assert approved["status"] == "queued"
    assert approved["approved_by"]
    page.goto(f"/queue/{job_id}")
    # by the approving key's name, as "By" names the submitting key's
    assert approved["approved_by_name"] == f"{lead}-key"
    expect(page.locator("#facts")).to_contain_text(f"Approved by{lead}-key")
    expect(page.locator("#approve")).to_be_hidden()


DEFAULT_POLICY = {
    "fair_share": False, "half_life_s": 604800.0, "preemption": False, "min_runtime_s": 600.0,
    "preempt_grace_s": 120.0, "approve_gpus_over": None, "approve_levels": ["viewer"],
    "user_max_jobs": None,
}  # fmt: skip


@pytest.fixture
def policy_restored(server: ServerProcess) -> Iterator[None]:
    """The module's server shares one policy: put back as the other tests expect it."""
    yield
    admin_call(server, "PATCH", "/api/queue/policy", json=DEFAULT_POLICY)


def test_an_admin_sets_the_queue_policy_in_the_queue_panel_and_a_researcher_is_told_the_rule(
    server: ServerProcess, page: Page, policy_restored: None
) -> None:
    page.set_viewport_size(WIDE)
    sign_in(page, server.admin_key, then="/queue")
    expect(page.locator("#policy-approvals")).to_have_text(
        "viewers' jobs wait for a lead's or an admin's approval"
    )
    expect(page.locator("#policy-limits")).to_have_text("none")
    page.click("#policy-edit")
    form = page.locator("#policy-form")
    expect(form).to_be_visible()
    form.locator("[name=half_life_h]").fill("0")  # under the least the policy takes
    form.locator("[name=user_max_jobs]").fill("2")
    page.click("#policy-save")
    expect(form.locator('[data-error-for="half_life_h"]')).to_contain_text("at least")
    assert admin_call(server, "GET", "/api/queue/policy")["user_max_jobs"] is None  # nothing
    form.locator("[name=fair_share]").check()
    form.locator("[name=half_life_h]").fill("24")
    form.locator("[name=preemption]").check()
    form.locator("[name=min_runtime_min]").fill("5")
    form.locator("[name=preempt_grace_s]").fill("30")
    form.locator("[name=approve_levels][value=researcher]").check()
    form.locator("[name=approve_gpus_over]").fill("4")
    screenshot(page, "queue-policy-dialog")
    page.click("#policy-save")
    expect(page.locator("#policy")).to_be_hidden()

    policy = admin_call(server, "GET", "/api/queue/policy")
    assert (policy["fair_share"], policy["half_life_s"]) == (True, 86400.0)
    assert (policy["preemption"], policy["min_runtime_s"], policy["preempt_grace_s"]) == (
        True, 300.0, 30.0,
    )  # fmt: skip
    assert policy["approve_levels"] == ["researcher", "viewer"]
    assert (policy["approve_gpus_over"], policy["user_max_jobs"]) == (4, 2)
    expect(page.locator("#policy-limits")).to_have_text("per user 2 jobs")
    expect(page.locator("#policy-approvals")).to_have_text(
        "researchers' and viewers' jobs, and jobs asking more than 4 GPUs, wait for a lead's "
        "or an admin's approval"
    )
    expect(page.locator("#policy-fair-share")).to_have_text("on, usage halves every 1 d")
    expect(page.locator("#policy-preemption")).to_have_text(
        "on, after 5 min of running, with 30 s to checkpoint"
    )
    screenshot(page, "queue-policy")
    sign_out(page)

    # A researcher reads the policy, may not change it, and is told why their job waits.
    _name, key = user_with_key(server, "researcher", "queue.read", "queue.submit")
    job_id = held_job(server, key)
    with as_key(server, key) as researcher:
        refused = researcher.patch("/api/queue/policy", json={"approve_levels": []})
    assert refused.status_code == 403, refused.text
    assert admin_call(server, "GET", "/api/queue/policy")["approve_levels"] == [
        "researcher", "viewer",
    ]  # fmt: skip
    sign_in(page, key, then="/queue")
    expect(page.locator("#policy-approvals")).to_contain_text("researchers' and viewers' jobs")
    expect(page.locator("#policy-edit")).to_have_count(0)
    page.set_viewport_size(PHONE)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the policy makes the Queue page {overflow} px too wide on a phone"
    screenshot(page, "phone-queue-policy")
    page.goto(f"/queue/{job_id}")
    expect(page.locator("#waiting-summary")).to_have_text(
        "held for approval: researchers' jobs need a lead's or an admin's approval (queue "
        "policy); a lead of its team or an admin approves it with Approve on the Queue page"
    )


def test_the_policy_dialog_fits_a_phone(
    server: ServerProcess, page: Page, policy_restored: None
) -> None:
    page.set_viewport_size(PHONE)
    # The first read of the policy is held: until it comes, Edit policy cannot be clicked (it
    # once could, and opened nothing, which is how this test failed on a busy machine).
    policy_read = HeldRequest(page, "**/api/queue/policy")
    sign_in(page, server.admin_key, then="/queue")
    edit = page.locator("#policy-edit")
    expect(edit).to_be_disabled()
    policy_read.arrived("the Queue page's read of the policy")
    policy_read.release()
    page.click("#policy-edit")
    expect(page.locator("dialog#policy")).to_be_visible()
    save = page.locator("#policy-save")
    save.scroll_into_view_if_needed()
    box = save.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    screenshot(page, "phone-queue-policy-dialog")
    page.locator("#policy-form [name=max_gpus]").fill("8")
    save.click()
    expect(page.locator("#policy-limits")).to_have_text("fleet 8 GPUs")
    assert admin_call(server, "GET", "/api/queue/policy")["max_gpus"] == 8
    admin_call(server, "PATCH", "/api/queue/policy", json={"max_gpus": None})


def test_a_lead_sees_the_teams_but_not_the_admins_forms(server: ServerProcess, page: Page) -> None:
    team = unique("speech")
    admin_call(server, "POST", "/api/teams", json={"name": team, "weight": 2})
    _, lead_key = user_with_key(server, "lead", "queue.read", "queue.approve")
    sign_in(page, lead_key, then="/teams")
    card = page.locator(f'section.team[data-team="{team}"]')
    expect(card.locator('[data-fact="weight"]')).to_have_text("2")
    expect(card.locator('[data-fact="cost"]')).to_have_text("$0.00 to date on the pools' workers")
    expect(card.locator("button")).to_have_count(0)
    expect(page.locator("#admin")).to_be_hidden()


def test_a_lead_rejects_a_job_from_its_page_with_a_reason_and_it_is_cancelled(
    server: ServerProcess, page: Page
) -> None:
    team = unique("nlp")
    admin_call(server, "POST", "/api/teams", json={"name": team})
    viewer, viewer_key = user_with_key(server, "viewer", "queue.read", "queue.submit", team=team)
    _, lead_key = user_with_key(server, "lead", "queue.read", "queue.approve", team=team)
    job_id = held_job(server, viewer_key)
    reason = "ask for 1 GPU, not the whole node"

    sign_in(page, lead_key, then=f"/queue/{job_id}")
    facts = page.locator("#facts")
    expect(facts).to_contain_text(viewer)
    expect(facts).to_contain_text(team)
    expect(page.locator("#status")).to_have_text("waiting for approval")
    expect(page.locator("#approve")).to_be_visible()

    page.click("#reject")
    expect(page.locator("#confirm-title")).to_have_text(f"Reject {job_id}?")
    page.click("#confirm-yes")  # no reason yet: refused beside the field
    expect(page.locator("#confirm-input-error")).to_contain_text("Give a reason")
    assert job(server, job_id)["status"] == "pending_approval"
    page.fill("#confirm-input", reason)
    page.click("#confirm-yes")

    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator("#approve")).to_be_hidden()
    rejected = job(server, job_id)
    assert rejected["status"] == "cancelled"
    assert reason in rejected["error"]


def test_an_admin_creates_a_team_and_a_user_adds_the_member_and_sets_weight_and_limits(
    server: ServerProcess, page: Page
) -> None:
    team, user = unique("nlp"), unique("alice")
    sign_in(page, server.admin_key, then="/teams")
    expect(page.locator("#admin")).to_be_visible()

    page.fill("#t-name", team)
    page.fill("#t-weight", "0")
    page.click("#team-create")
    expect(page.locator("#t-weight-error")).to_contain_text("above 0")
    page.fill("#t-weight", "2")
    page.fill("#t-max_gpus", "8")
    page.click("#team-create")
    card = page.locator(f'section.team[data-team="{team}"]')
    expect(card.locator('[data-fact="weight"]')).to_have_text("2")
    created = admin_call(server, "GET", f"/api/teams/{team}")
    assert (created["weight"], created["max_gpus"], created["max_jobs"]) == (2, 8, None)

    page.fill("#t-name", team)  # taken: the server's word, beside the button, not HTTP's
    page.click("#team-create")
    refused = page.locator("#team-form [data-error-for=form]")
    expect(refused).to_contain_text(team)
    expect(refused).not_to_contain_text("409")

    page.fill("#u-name", user)
    page.select_option("#u-level", "viewer")
    page.click("#user-create")
    expect(page.locator(f'#users tr[data-user="{user}"]')).to_be_visible()
    assert admin_call(server, "GET", f"/api/users/{user}")["level"] == "viewer"

    card.locator("select[name=user]").select_option(user)
    card.locator("[data-action=add-member]").click()
    expect(card.locator(f'[data-member="{user}"]')).to_be_visible()
    assert admin_call(server, "GET", f"/api/teams/{team}")["members"] == [user]

    edit = card.locator("form.team-edit")
    edit.locator("input[name=weight]").fill("3.5")
    edit.locator("input[name=max_gpus]").fill("")
    edit.locator("input[name=max_jobs]").fill("-1")
    edit.locator("[data-action=save]").click()
    expect(edit.locator("[data-error-for=max_jobs]")).to_contain_text("whole number")
    edit.locator("input[name=max_jobs]").fill("4")
    edit.locator("[data-action=save]").click()
    expect(card.locator('[data-fact="weight"]')).to_have_text("3.5")
    changed = admin_call(server, "GET", f"/api/teams/{team}")
    assert (changed["weight"], changed["max_gpus"], changed["max_jobs"]) == (3.5, None, 4)

    page.locator(f'#users tr[data-user="{user}"] select[name=level]').select_option("lead")
    page.locator(f'#users tr[data-user="{user}"] [data-action=save-level]').click()
    expect(page.locator(f'#users tr[data-user="{user}"] select[name=level]')).to_have_value("lead")
    wait_until(
        lambda: admin_call(server, "GET", f"/api/users/{user}")["level"] == "lead",
        timeout=10,
        message="the level change to reach the API",
        interval=0.1,
    )

    users_row = page.locator(f'#users tr[data-user="{user}"]')
    users_row.locator("[data-action=limits]").click()
    page.fill("#l-max_queued", "2.5")
    page.click("#user-limits-save")
    expect(page.locator("#l-max_queued-error")).to_contain_text("whole number")
    page.fill("#l-max_queued", "50")
    page.click("#user-limits-save")
    expect(users_row.locator('[data-label="Limits"]')).to_have_text("at most 50 queued")
    assert admin_call(server, "GET", f"/api/users/{user}")["max_queued"] == 50

    card.locator(f'[data-member="{user}"] [data-action=remove-member]').click()
    expect(card.locator(f'[data-member="{user}"]')).to_have_count(0)
    assert admin_call(server, "GET", f"/api/teams/{team}")["members"] == []
    screenshot(page, "teams")


def test_an_admin_renames_a_team_and_a_user_from_the_teams_page(
    server: ServerProcess, page: Page
) -> None:
    """Neither could be renamed: a typo in a name stayed for good."""
    team, user = unique("tema"), unique("usr")
    created = admin_call(server, "POST", "/api/teams", json={"name": team})
    admin_call(server, "POST", "/api/users", json={"name": user, "level": "viewer", "team": team})
    sign_in(page, server.admin_key, then="/teams")

    card = page.locator(f'section.team[data-team="{team}"]')
    edit = card.locator("form.team-edit")
    expect(edit.locator("input[name=name]")).to_have_value(team)
    edit.locator("input[name=name]").fill("")
    edit.locator("[data-action=save]").click()
    expect(edit.locator("[data-error-for=name]")).to_contain_text("needs a name")
    new_team = unique("team")
    edit.locator("input[name=name]").fill(new_team)
    edit.locator("[data-action=save]").click()
    renamed = page.locator(f'section.team[data-team="{new_team}"]')
    expect(renamed).to_be_visible()
    assert admin_call(server, "GET", f"/api/teams/{created['id']}")["name"] == new_team

    row = page.locator(f'#users tr[data-user="{user}"]')
    row.locator("[data-action=limits]").click()
    expect(page.locator("#user-limits-title")).to_have_text(f"Edit {user}")
    expect(page.locator("#l-name")).to_have_value(user)
    page.fill("#l-name", "admin")  # taken
    page.click("#user-limits-save")
    expect(page.locator("#user-limits")).to_contain_text("exists already")
    new_user = unique("user")
    page.fill("#l-name", new_user)
    page.click("#user-limits-save")
    expect(page.locator(f'#users tr[data-user="{new_user}"]')).to_be_visible()
    expect(renamed.locator(f'[data-member="{new_user}"]')).to_be_visible()
    moved = admin_call(server, "GET", f"/api/users/{new_user}")
    assert (moved["teams"], moved["level"]) == ([new_team], "viewer")


def test_the_teams_page_is_live_but_never_under_an_edit_not_saved(
    server: ServerProcess, page: Page
) -> None:
    """The Teams page was the one page a change elsewhere did not reach without a reload."""
    sign_in(page, server.admin_key, then="/teams")
    expect(page.locator("main")).not_to_contain_text("Loading…")
    team, user = unique("live"), unique("member")
    # Both made at once: the page re-reads at most every 2 s (teams.js LIVE_MS), one wait.
    admin_call(server, "POST", "/api/teams", json={"name": team})
    admin_call(server, "POST", "/api/users", json={"name": user, "level": "viewer", "team": team})
    card = page.locator(f'section.team[data-team="{team}"]')
    expect(card).to_be_visible()  # no reload
    expect(card.locator(f'[data-member="{user}"]')).to_be_visible()
    expect(page.locator(f'#users tr[data-user="{user}"]')).to_be_visible()

    weight = card.locator("form.team-edit input[name=weight]")
    weight.fill("7")
    page.locator("h1").click()  # the field loses the focus, its edit is not saved yet
    other = unique("later")
    admin_call(server, "POST", "/api/teams", json={"name": other})
    expect(page.locator("#teams")).to_have_attribute("data-held", "")  # its nudge: held
    expect(page.locator(f'section.team[data-team="{other}"]')).to_have_count(0)
    expect(weight).to_have_value("7")
    card.locator("form.team-edit [data-action=save]").click()
    expect(page.locator(f'section.team[data-team="{other}"]')).to_be_visible()
    assert admin_call(server, "GET", f"/api/teams/{team}")["weight"] == 7


def test_a_teams_usage_over_time_is_drawn_once_it_has_samples(
    sampling_server: ServerProcess, sampling_page: Page
) -> None:
    server = sampling_server
    team = unique("vision")
    admin_call(server, "POST", "/api/teams", json={"name": team})
    wait_until(
        lambda: len(admin_call(server, "GET", f"/api/teams/{team}/usage")["samples"]) >= 2,
        timeout=15,
        message=f"two usage samples of {team}",
        interval=USAGE_INTERVAL_S,
    )

    page = sampling_page
    sign_in(page, server.admin_key, then="/teams")
    card = page.locator(f'section.team[data-team="{team}"]')
    chart = card.locator('figure.chart[data-series="Running GPUs"] svg')
    expect(chart).to_be_visible()
    expect(chart).to_have_attribute("data-points", re.compile(r"^([2-9]|[1-9]\d+)$"))  # >= 2
    expect(chart.locator("path.line")).to_have_count(1)
    expect(card.locator('figure.chart[data-series^="Usage"] svg path.line')).to_have_count(1)
    # The clock of the rest of the UI: 24 hours, not "03:04:05 PM" (#33.14).
    # x: times, waited for as every check above is (a live update may draw the chart anew)
    times = chart.locator("text.tick", has_text=":")
    expect(times).to_have_text([re.compile(r"^\d\d:\d\d:\d\d$")] * 2)
    assert not re.search(r"AM|PM", chart.get_attribute("aria-label") or ""), "12-hour clock"
    screenshot(page, "team-usage")


def test_a_key_made_on_the_keys_page_belongs_to_the_user_chosen(
    server: ServerProcess, page: Page
) -> None:
    user, _ = user_with_key(server, "researcher", "queue.read")
    sign_in(page, server.admin_key, then="/keys")
    page.click("#key-create-open")
    page.fill("#k-name", unique("ci"))
    page.select_option("#k-user", user)
    page.check("#key-form input[value='queue.read']")
    page.click("#key-form button[type=submit]")
    expect(page.locator("#key-value")).to_contain_text("gfk_")
    key = page.locator("#key-value").inner_text()
    page.click("#key-copy")
    page.click("#key-done")

    with as_key(server, key) as client:
        assert client.get("/api/users/me").json()["name"] == user
    expect(page.locator("#keys tbody tr").first.locator('[data-label="User"]')).to_have_text(user)


def fits(page: Page, path: str, sizes: tuple[ViewportSize, ...]) -> None:
    """The page is no wider than the window at each size; it is left at a phone's."""
    for size in sizes:
        page.set_viewport_size(size)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow} px too wide at {size['width']} px"
    page.set_viewport_size(PHONE)


def test_the_sharing_pages_fit_a_phone(server: ServerProcess, page: Page) -> None:
    """One session visits each page (a profile and a sign-in a page cost more than the page)."""
    admin_call(server, "POST", "/api/teams", json={"name": unique("a-rather-long-team-name")})
    sign_in(page, server.admin_key, then="/queue")
    for path in ("/queue", "/teams", "/keys"):
        if path != "/queue":
            page.goto(path)
        expect(page.locator("main")).not_to_contain_text("Loading…")
        fits(page, path, (PHONE, LAPTOP))
        screenshot(page, f"phone-sharing-{path.strip('/')}")


def test_a_researcher_sees_the_fleet_and_its_history_but_no_action_on_it(
    sampling_server: ServerProcess, sampling_page: Page
) -> None:
    server = sampling_server
    pool = unique("pool")
    created = admin_call(
        server, "POST", "/api/admin/workers", json={"name": unique("gpu"), "labels": {"pool": pool}}
    )
    _, key = user_with_key(server, "researcher", "queue.read", "queue.submit")
    with as_key(server, key) as researcher:
        waiting = researcher.post(  # waits in the pool's group: its worker never connects
            "/api/queue/submit", json={"config": {}, "worker_labels": {"pool": pool}}
        )
        assert waiting.status_code == 201, waiting.text
        for method, path in [
            ("POST", f"/api/admin/workers/{created['worker_id']}/drain"),
            ("POST", f"/api/admin/workers/{created['worker_id']}/token"),
            ("DELETE", f"/api/admin/workers/{created['worker_id']}"),
        ]:
            assert researcher.request(method, path).status_code == 403, (method, path)
        listed = researcher.get("/api/fleet/workers")
    assert created["token"] not in listed.text and "admin_labels" not in listed.text

    page = sampling_page
    page.set_viewport_size(WIDE)
    sign_in(page, key, then="/fleet")
    nav = page.locator("nav[aria-label=Pages]")
    expect(nav.get_by_role("link", name="Fleet")).to_have_attribute("aria-current", "page")
    expect(nav.get_by_role("link", name="Workers")).to_have_count(0)
    row = page.locator(f'#fleet-workers tr[data-worker="{created["name"]}"]')
    expect(row.locator('[data-label="Labels"]')).to_have_text(f"pool={pool}")
    expect(row).to_have_attribute("data-presence", "never_connected")
    expect(page.locator("main button, main [data-action]")).to_have_count(0)

    busy = page.locator('figure.chart[data-series="Busy workers"] svg')
    expect(busy).to_be_visible()
    assert int(busy.get_attribute("data-points") or 0) >= 2
    page.select_option("#group", f"pool={pool}")  # offered once the group was sampled
    depth = page.locator('figure.chart[data-series="Queue depth (jobs)"]')
    expect(depth.locator(".latest")).to_have_text("1")
    with as_key(server, key) as researcher:
        sampled = researcher.get("/api/fleet/history", params={"group": f"pool={pool}"}).json()
    assert sampled["samples"][-1]["queue_depth"] == 1
    assert sampled["samples"][-1]["workers_unavailable"] == 1
    screenshot(page, "fleet")

    page.select_option("#range", "week")
    expect(page.locator("#charts")).to_have_attribute("data-resolution", "900")
    page.goto("/workers")  # an admin's page: refused, with nothing to click
    expect(page.locator("main")).to_contain_text("lacks the admin.workers permission")
    expect(page.locator("#create-open")).to_have_count(0)


def test_the_fleet_page_fits_a_phone_and_a_wide_screen(
    sampling_server: ServerProcess, sampling_page: Page
) -> None:
    _, key = user_with_key(sampling_server, "viewer", "queue.read")
    page = sampling_page
    page.set_viewport_size(PHONE)
    sign_in(page, key, then="/fleet")
    expect(page.locator('figure.chart[data-series="Idle workers"] svg')).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("Loading…")
    fits(page, "/fleet", (PHONE, WIDE))
    page.select_option("#range", "day")
    expect(page.locator("#charts")).to_have_attribute("data-resolution", "0")
    screenshot(page, "phone-fleet")
