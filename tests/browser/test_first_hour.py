"""A new operator's first hour in Chromium (#33): what the Train, Queue, Teams and Keys pages
offer is what the server will do, each click checked through the API."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in, train_ready
from tests.e2e.conftest import ServerProcess, unique
from tests.waiting import wait_until

DESKTOP = {"width": 1440, "height": 900}
NOWHERE = {"model_type": "lora"}  # a config that waits on a label no worker has


def as_key(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})


def admin_call(server: ServerProcess, method: str, path: str, **kwargs: Any) -> Any:
    with server.admin() as admin:
        resp = admin.request(method, path, **kwargs)
    assert resp.is_success, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp.json()


def user_with_key(server: ServerProcess, level: str, *permissions: str) -> tuple[str, str]:
    """A new user at `level` and a key of theirs with `permissions`: (name, key)."""
    name = unique(level)
    admin_call(server, "POST", "/api/users", json={"name": name, "level": level})
    minted = admin_call(
        server,
        "POST",
        "/api/admin/api-keys",
        json={"name": f"{name}-key", "permissions": list(permissions), "user": name},
    )
    return name, str(minted["key"])


def submit_from_train(page: Page, labels: str) -> dict[str, Any]:
    """Press the Train page's button; the job it made, as the job page's URL names it."""
    page.fill("#config-json", '{"model_type": "lora"}')
    page.fill("#labels", labels)
    page.click("#submit")
    page.wait_for_url("**/queue/j_*")
    return {"id": page.url.rsplit("/", 1)[1]}


# ---- 1. the Train page's priority is the level's default unless typed ----------------------


def test_a_train_page_job_gets_the_levels_default_priority_unless_one_is_typed(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    priority = page.locator("#priority")
    expect(priority).to_have_value("")  # nothing sent unless typed
    expect(priority).to_have_attribute("placeholder", "30")  # the admin's default, shown

    job = submit_from_train(page, f"pool={unique('none')}")
    assert admin_call(server, "GET", f"/api/queue/{job['id']}")["priority"] == 30

    page.goto("/train")
    train_ready(page)
    page.fill("#priority", "7")
    job = submit_from_train(page, f"pool={unique('none')}")
    assert admin_call(server, "GET", f"/api/queue/{job['id']}")["priority"] == 7


def test_a_researchers_train_page_shows_and_sends_the_researchers_default(
    server: ServerProcess, page: Page
) -> None:
    _, key = user_with_key(server, "researcher", "queue.submit", "queue.read")
    sign_in(page, key, then="/train")
    train_ready(page)
    expect(page.locator("#priority")).to_have_attribute("placeholder", "10")
    job = submit_from_train(page, f"pool={unique('none')}")
    assert admin_call(server, "GET", f"/api/queue/{job['id']}")["priority"] == 10


# ---- 2. a bulk action's failures stay on the page ------------------------------------------

QUICK = {"command": ["python", "-c", "print('hello')"]}


def submitted(server: ServerProcess, **body: Any) -> str:
    return str(admin_call(server, "POST", "/api/queue/submit", json=body)["id"])


def test_a_bulk_cancels_failures_stay_shown_while_the_queue_refreshes(
    server: ServerProcess, page: Page
) -> None:
    ended = submitted(server, config=QUICK, target="local")
    wait_until(
        lambda: admin_call(server, "GET", f"/api/queue/{ended}")["status"] == "completed",
        timeout=30,
        message=f"{ended} to complete",
    )
    waiting = submitted(server, config=NOWHERE, worker_labels={"pool": unique("none")})
    sign_in(page, server.admin_key, then="/queue")
    for job_id in (ended, waiting):
        page.check(f'#jobs tr[data-job="{job_id}"] .pick')
    page.click("#bulk-cancel")
    page.click("#confirm-yes")
    expect(page.locator(f'#jobs tr[data-job="{waiting}"]')).to_have_attribute(
        "data-status", "cancelled"
    )
    message = page.locator("#error")
    expect(message).to_contain_text(f"Cancelled 1 job; 1 not: {ended}")
    assert admin_call(server, "GET", f"/api/queue/{waiting}")["status"] == "cancelled"

    # Another job arrives: the list refreshes live, and the message is still there.
    later = submitted(server, config=NOWHERE, worker_labels={"pool": unique("none")})
    expect(page.locator(f'#jobs tr[data-job="{later}"]')).to_be_visible()
    expect(message).to_contain_text(f"1 not: {ended}")


# ---- 7. Train refuses a local job the local runner can never run ---------------------------


def job_total(server: ServerProcess) -> int:
    return int(admin_call(server, "GET", "/api/queue", params={"limit": 1})["total"])


def test_the_api_refuses_a_local_job_wanting_more_gpus_than_the_local_runner_has(
    server: ServerProcess,
) -> None:
    local = admin_call(server, "GET", "/api/admin/workers/w_local")
    wanted = local["gpu_count"] + 2
    before = job_total(server)
    with server.admin() as admin:
        resp = admin.post(
            "/api/queue/submit",
            json={"config": NOWHERE, "target": "local", "gpu_count": wanted},
        )
    assert resp.status_code == 422, resp.text
    assert "the local runner has" in resp.json()["detail"]
    assert f"needs {wanted} GPUs" in resp.json()["detail"]
    assert job_total(server) == before  # nothing stored


def test_train_says_before_submitting_that_the_local_runner_lacks_the_gpus(
    server: ServerProcess, page: Page
) -> None:
    """Typed at 1440 px, the hint read at each width, submitted at a phone's."""
    local_gpus = admin_call(server, "GET", "/api/admin/workers/w_local")["gpu_count"]
    page.set_viewport_size(DESKTOP)
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    button = page.locator("#submit")
    expect(button).to_have_text("Train on a worker")
    page.check("input[name=target][value=local]")
    expect(button).to_have_text("Train locally")
    page.fill("#gpu-count", str(local_gpus + 2))
    hint = page.locator("#gpu-error")
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        expect(hint).to_be_visible()
        expect(hint).to_contain_text("the local runner has")
        expect(hint).to_contain_text("Worker or Auto")
        screenshot(page, f"train-local-too-small-{viewport['width']}")

    before = job_total(server)
    page.fill("#config-json", '{"model_type": "lora"}')
    button.click()
    expect(page.locator("#error")).to_contain_text("the local runner has")
    assert "/train" in page.url
    assert job_total(server) == before  # refused: no job that could never run

    page.check("input[name=target][value=auto]")
    expect(hint).to_be_hidden()  # a worker may yet come for it
    expect(button).to_have_text("Train on a worker, else locally")


# ---- 8. the Users table offers only what the server will do, and a level waits for Save ----


def user_level(server: ServerProcess, name: str) -> str:
    return str(admin_call(server, "GET", f"/api/users/{name}")["level"])


def test_the_users_table_offers_no_level_or_delete_for_the_built_in_admin_or_yourself(
    server: ServerProcess, page: Page
) -> None:
    me, key = user_with_key(server, "admin", "*")
    other = unique("other")
    admin_call(server, "POST", "/api/users", json={"name": other, "level": "researcher"})
    sign_in(page, key, then="/teams")
    for viewport in (DESKTOP, PHONE):  # one page, read at each width
        page.set_viewport_size(viewport)
        users_table_offers_only_what_the_server_does(page, me, other)
        screenshot(page, f"teams-users-{viewport['width']}")


def users_table_offers_only_what_the_server_does(page: Page, me: str, other: str) -> None:
    for name in ("admin", me):
        row = page.locator(f'#users tr[data-user="{name}"]')
        expect(row).to_be_visible()
        expect(row.locator("select[name=level]")).to_have_count(0)
        expect(row.locator("[data-action=delete-user]")).to_have_count(0)
        expect(row.locator('[data-label="Level"]')).to_contain_text("admin")
    expect(page.locator('#users tr[data-user="admin"] [data-label="Level"]')).to_contain_text(
        "built-in"
    )
    expect(page.locator(f'#users tr[data-user="{me}"] [data-label="Level"]')).to_contain_text("you")
    row = page.locator(f'#users tr[data-user="{other}"]')
    expect(row.locator("select[name=level]")).to_be_visible()
    expect(row.locator("[data-action=delete-user]")).to_be_visible()


def test_a_users_level_changes_only_when_saved(server: ServerProcess, page: Page) -> None:
    name = unique("leveled")
    admin_call(server, "POST", "/api/users", json={"name": name, "level": "researcher"})
    sign_in(page, server.admin_key, then="/teams")
    row = page.locator(f'#users tr[data-user="{name}"]')
    save = row.locator("[data-action=save-level]")
    expect(save).to_be_disabled()  # nothing chosen yet

    row.locator("select[name=level]").select_option("lead")
    expect(save).to_be_enabled()
    # Chosen, not saved: the server still has the old level (give a stray request time to land
    # by reading the page's own list, which the server answers after any earlier request).
    page.reload()
    row = page.locator(f'#users tr[data-user="{name}"]')
    expect(row.locator("select[name=level]")).to_have_value("researcher")
    assert user_level(server, name) == "researcher"

    row.locator("select[name=level]").select_option("lead")
    row.locator("[data-action=save-level]").click()
    expect(row.locator("[data-action=save-level]")).to_be_disabled()
    wait_until(lambda: user_level(server, name) == "lead", timeout=15, message="the saved level")
    expect(row.locator("select[name=level]")).to_have_value("lead")


# ---- 14. papercuts -------------------------------------------------------------------------


def test_the_create_key_dialog_offers_only_what_the_chosen_users_level_allows(
    server: ServerProcess, page: Page
) -> None:
    """Chosen at 1440 px, the dialog read at each width, the key made at a phone's."""
    name = unique("res")
    admin_call(server, "POST", "/api/users", json={"name": name, "level": "researcher"})
    page.set_viewport_size(DESKTOP)
    sign_in(page, server.admin_key, then="/keys")
    page.click("#key-create-open")
    everything = page.locator('#key-form input[name=permissions][value="*"]')
    workers = page.locator('#key-form input[name=permissions][value="admin.workers"]')
    read = page.locator('#key-form input[name=permissions][value="queue.read"]')
    hint = page.locator("#k-perm-hint")
    expect(page.locator(f'#k-user option[value="{name}"]')).to_have_count(1)
    expect(everything).to_be_enabled()  # "me": the admin may have all of them
    everything.check()

    page.select_option("#k-user", name)
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        expect(everything).to_be_disabled()
        expect(everything).not_to_be_checked()  # a choice the level cannot have is taken back
        expect(workers).to_be_disabled()
        expect(read).to_be_enabled()
        expect(hint).to_contain_text("researcher")
        expect(hint).to_contain_text("queue.read, queue.submit")
        screenshot(page, f"keys-create-researcher-{viewport['width']}")

    page.fill("#k-name", f"{name}-key")
    read.check()
    page.click("#key-form button[type=submit]")
    expect(page.locator("#key-value")).to_contain_text("gf")
    keys = admin_call(server, "GET", "/api/admin/api-keys")
    made = next(k for k in keys if k["name"] == f"{name}-key")
    assert (made["user"], made["permissions"]) == (name, ["queue.read"])


def test_creating_a_user_says_the_next_step_as_the_cli_does(
    server: ServerProcess, page: Page
) -> None:
    name = unique("newbie")
    sign_in(page, server.admin_key, then="/teams")
    page.fill("#u-name", name)
    page.click("#user-create")
    next_step = page.locator("#user-next")
    expect(next_step).to_contain_text(f"Created user {name}")
    expect(next_step).to_contain_text(f"gpufleet keys create {name}-key --user {name}")
    expect(next_step.get_by_role("link", name="API keys")).to_have_attribute("href", "/keys")
    assert admin_call(server, "GET", f"/api/users/{name}")["level"] == "researcher"


def test_a_job_page_of_no_job_says_so_and_links_the_queue(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/queue")
    answer = page.goto("/queue/j_nope")
    assert answer is not None and answer.status == 404
    expect(page.locator("main")).to_contain_text("There is no job j_nope")
    expect(page.locator("main")).not_to_contain_text("oading")  # nothing left "loading…"
    page.locator("main").get_by_role("link", name="Queue").first.click()
    page.wait_for_url("**/queue")


def test_an_unknown_address_is_an_html_page_for_a_browser_and_json_for_a_script(
    server: ServerProcess, page: Page
) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/queue")
    answer = page.goto("/no-such-page")
    assert answer is not None and answer.status == 404
    assert answer.headers["content-type"].startswith("text/html")
    expect(page.locator("h1")).to_have_text("Page not found")
    expect(page.locator("main")).to_contain_text("/no-such-page")
    screenshot(page, "not-found-390")
    expect(page.locator("nav").get_by_role("link", name="Queue")).to_be_visible()
    page.locator("main").get_by_role("link", name="start page").click()
    page.wait_for_url(lambda url: "no-such-page" not in url)

    with httpx.Client(base_url=server.url) as script:
        plain = script.get("/no-such-page")
        api = script.get("/api/no-such-endpoint", headers={"Accept": "text/html"})
    for resp in (plain, api):
        assert resp.status_code == 404
        assert resp.headers["content-type"] == "application/json"
        assert "no such endpoint" in resp.json()["detail"]
