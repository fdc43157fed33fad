"""The Queue and job pages in Chromium: re-run and cancel (one job, or the selected ones),
filters kept in the URL, names beside ids, and nothing a key may not read (#15)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, Response, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.e2e.conftest import ServerProcess, unique
from tests.waiting import wait_until

QUICK = {"command": ["python", "-c", "print('hello')"]}


def submit(server: ServerProcess, **body: Any) -> dict[str, Any]:
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json={"config": {"model_type": "lora"}, **body})
    assert resp.status_code == 201, resp.text
    job: dict[str, Any] = resp.json()
    return job


def waiting_jobs(server: ServerProcess, label: str, count: int) -> list[str]:
    """Jobs no worker can run (they wait for a label nobody has), newest first: submitted on
    one connection (a client a job made a hundred of them)."""
    body = {"config": {"model_type": "lora"}, "worker_labels": {"pool": label}}
    jobs = []
    with server.admin() as admin:
        for _ in range(count):
            resp = admin.post("/api/queue/submit", json=body)
            assert resp.status_code == 201, resp.text
            jobs.append(resp.json()["id"])
    return jobs[::-1]


def job(server: ServerProcess, job_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        body: dict[str, Any] = admin.get(f"/api/queue/{job_id}").json()
    return body


def ended_local_job(server: ServerProcess) -> dict[str, Any]:
    job_id = submit(server, config=QUICK, target="local")["id"]
    return wait_until(
        lambda: (
            (body := job(server, job_id))["status"] in ("completed", "failed", "cancelled") and body
        ),
        timeout=30,
        message=f"job {job_id} to end",
        interval=0.1,
    )


def jobs_labelled(server: ServerProcess, label: str) -> list[dict[str, Any]]:
    with server.admin() as admin:
        body = admin.get("/api/queue", params={"label": f"pool={label}", "limit": 100}).json()
    jobs: list[dict[str, Any]] = body["jobs"]
    return jobs


def test_filters_are_kept_in_the_url_so_a_reload_shows_the_same_list(
    server: ServerProcess, page: Page
) -> None:
    """#15.9: the status filter was not in the URL."""
    label = unique("url")
    waiting, cancelled = waiting_jobs(server, label, 2)
    with server.admin() as admin:
        assert admin.post(f"/api/queue/{cancelled}/cancel").status_code == 200
    sign_in(page, server.admin_key, then="/queue")
    expect(page.locator("#total")).to_contain_text("job")

    page.select_option("#status-filter", "cancelled")
    expect(page).to_have_url(f"{server.url}/queue?status=cancelled")
    page.fill("#f-label", f"pool={label}")
    page.press("#f-label", "Enter")

    expect(page).to_have_url(f"{server.url}/queue?status=cancelled&label=pool%3D{label}")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'#jobs tr[data-job="{cancelled}"]')).to_be_visible()
    page.reload()
    expect(page.locator("#status-filter")).to_have_value("cancelled")
    expect(page.locator("#f-label")).to_have_value(f"pool={label}")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'#jobs tr[data-job="{cancelled}"]')).to_be_visible()

    page.goto(f"/queue?q={waiting[:10]}&target=worker&label=pool%3D{label}")  # a shared link
    expect(page.locator("#f-q")).to_have_value(waiting[:10])
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'#jobs tr[data-job="{waiting}"] td[data-label="Target"]')).to_have_text(
        "worker"
    )
    page.click("#clear")
    expect(page).to_have_url(f"{server.url}/queue")


def test_a_read_only_key_reads_the_queue_and_a_job_with_no_forbidden_request(
    server: ServerProcess, page: Page
) -> None:
    """#15.9: a read-only key made every Queue page call /api/admin/workers (403); #15.6:
    worker names come with the jobs, so such a key sees them too."""
    ran = ended_local_job(server)
    with server.admin() as admin:
        minted = admin.post(
            "/api/admin/api-keys", json={"name": "reader", "permissions": ["queue.read"]}
        )
    forbidden: list[str] = []

    def watch(response: Response) -> None:
        if response.status == 403:
            forbidden.append(response.url)

    page.on("response", watch)  # removed at the end: the next test has this tab too
    try:
        sign_in(page, minted.json()["key"], then="/queue")
        expect(page.locator("#total")).to_contain_text("job")
        assert forbidden == []
        row = page.locator(f'#jobs tr[data-job="{ran["id"]}"]')
        expect(row.locator('td[data-label="Worker"]')).to_have_text("local")
        expect(page.locator("#bulk-cancel")).to_have_count(0)  # it may not act
        expect(row.locator("button")).to_have_count(0)
        row.locator("a").click()
        expect(page.locator("#facts")).to_contain_text("local")
        expect(page.locator("#rerun")).to_be_hidden()
        expect(page.locator("#attempts tbody tr")).to_have_count(1)
    finally:
        page.remove_listener("response", watch)

    assert forbidden == []


def test_the_job_page_names_its_worker_and_the_key_that_submitted_it(
    server: ServerProcess, page: Page
) -> None:
    """#15.6: the job page showed `w_…` and `key:k_…` where the Queue and header say names."""
    ran = ended_local_job(server)
    sign_in(page, server.admin_key, then=f"/queue/{ran['id']}")

    worker = page.locator("#facts dd").nth(3)
    by = page.locator("#facts dt", has_text="By").locator("xpath=following-sibling::dd[1]")
    expect(worker).to_have_text("local")
    expect(worker.locator("a")).to_have_attribute("title", ran["worker_id"])
    expect(worker.locator("a")).to_have_attribute("href", f"/workers/{ran['worker_id']}")
    expect(by).to_have_text("admin")
    expect(by.locator("span")).to_have_attribute("title", ran["submitted_by"])
    expect(page.locator('#attempts td[data-label="Worker"]')).to_have_text("local")


def test_the_job_page_links_what_it_runs_after_and_what_runs_after_it(
    server: ServerProcess, page: Page
) -> None:
    """Dependencies (docs/jobs.md): B waits on A, saying so with a link; A's page links B;
    cancelling A there cancels B, naming A."""
    label = unique("deps")
    (upstream,) = waiting_jobs(server, label, 1)
    after = submit(server, depends_on=[upstream], worker_labels={"pool": label})["id"]
    sign_in(page, server.admin_key, then=f"/queue/{after}")
    expect(page.locator("#waiting-summary")).to_contain_text(upstream)
    expect(page.locator('#facts [data-fact="depends-on"]')).to_contain_text("on completed")
    expect(page.locator('#facts [data-fact="depends-on"] .waits-on')).to_contain_text(upstream)

    page.locator("#waits-on a", has_text=upstream).click()
    page.wait_for_url(f"**/queue/{upstream}")
    expect(page.locator('#facts [data-fact="dependents"] a')).to_have_text(after)
    page.click("#cancel")
    page.click("#confirm-yes")
    expect(page.locator('#facts [data-fact="dependents"]')).to_contain_text("cancelled")
    cancelled = job(server, after)
    assert cancelled["status"] == "cancelled" and upstream in cancelled["error"]
    page.locator('#facts [data-fact="dependents"] a').click()
    page.wait_for_url(f"**/queue/{after}")
    expect(page.locator('[data-fact="error"]')).to_contain_text(upstream)


def test_cancel_and_rerun_from_the_queue_list_and_rerun_from_the_job_page(
    server: ServerProcess, page: Page
) -> None:
    label = unique("row")
    (first,) = waiting_jobs(server, label, 1)
    sign_in(page, server.admin_key, then=f"/queue?label=pool%3D{label}")
    row = page.locator(f'#jobs tr[data-job="{first}"]')

    row.locator("[data-action=cancel]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Cancel {first}?")
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-status", "cancelled")
    assert job(server, first)["status"] == "cancelled"

    row.locator("[data-action=rerun]").click()
    page.wait_for_url(lambda url: "/queue/j_" in url and first not in url)
    second = page.url.rsplit("/", 1)[1]
    assert job(server, second)["rerun_of"] == first
    assert job(server, second)["worker_labels"] == {"pool": label}
    expect(page.locator("#facts")).to_contain_text(f"Re-run of{first}")
    page.click("#cancel")
    page.click("#confirm-yes")
    expect(page.locator("#rerun")).to_be_visible()

    page.click("#rerun")  # from the job page
    page.wait_for_url(lambda url: second not in url)
    third = page.url.rsplit("/", 1)[1]
    assert job(server, third)["rerun_of"] == second
    page.goto(f"/queue/{second}")
    expect(page.locator("#facts")).to_contain_text(f"Re-run as{third}")
    page.locator("#facts a", has_text=first).click()
    expect(page.locator("#facts")).to_contain_text(f"Re-run as{second}")
    page.set_viewport_size({"width": 1440, "height": 900})
    screenshot(page, "job-rerun")


def test_bulk_cancel_then_bulk_rerun_of_the_selected_jobs(
    server: ServerProcess, page: Page
) -> None:
    label = unique("bulk")
    ids = waiting_jobs(server, label, 3)
    sign_in(page, server.admin_key, then=f"/queue?label=pool%3D{label}")
    expect(page.locator("#jobs tbody tr")).to_have_count(3)

    page.check("#select-all")
    expect(page.locator("#selected-count")).to_have_text("3 selected")
    page.uncheck(f'#jobs tr[data-job="{ids[0]}"] .pick')
    expect(page.locator("#selected-count")).to_have_text("2 selected")
    page.check(f'#jobs tr[data-job="{ids[0]}"] .pick')
    page.click("#bulk-cancel")
    expect(page.locator("#confirm-title")).to_have_text("Cancel 3 jobs?")
    screenshot(page, "queue-bulk")
    page.click("#confirm-yes")
    expect(page.locator('#jobs tr[data-status="cancelled"]')).to_have_count(3)
    assert {job(server, i)["status"] for i in ids} == {"cancelled"}

    page.check("#select-all")
    page.click("#bulk-rerun")
    expect(page.locator("#confirm-title")).to_have_text("Re-run 3 jobs?")
    page.click("#confirm-yes")
    expect(page.locator("#jobs tbody tr")).to_have_count(6)
    reruns = {j["rerun_of"] for j in jobs_labelled(server, label) if j["rerun_of"]}
    assert reruns == set(ids)
    expect(page.locator("#jobs .rerun-of")).to_have_count(3)
    expect(page.locator("#error")).to_be_empty()
    screenshot(page, "queue-rerun")


def test_the_queue_and_job_pages_fit_a_phone_screen(server: ServerProcess, page: Page) -> None:
    job_page = f"/queue/{ended_local_job(server)['id']}"
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/queue?status=queued")
    for path in ("/queue?status=queued", job_page):
        if path == job_page:
            page.goto(path)
        expect(page.locator("main")).not_to_contain_text("Loading…")

        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")

        assert overflow <= 0, f"{path} is {overflow} px wider than a phone screen"
        screenshot(page, "phone-job" if path == job_page else "phone-queue-filtered")


def page_of(first: int, last: int, total: int) -> str:
    """The Queue's count of a page of jobs, as `#total` says it."""
    return f"{first}\N{EN DASH}{last} of {total} jobs"


def test_older_and_newer_page_through_more_jobs_than_a_page_holds(
    server: ServerProcess, page: Page
) -> None:
    """The Queue showed the newest 100 jobs and no way to the others."""
    label = unique("pages")
    ids = waiting_jobs(server, label, 105)  # newest first
    with server.admin() as admin:
        older = admin.get(
            "/api/queue", params={"label": f"pool={label}", "limit": 100, "offset": 100}
        ).json()["jobs"]
    assert [j["id"] for j in older] == ids[100:]
    rows = page.locator("#jobs tbody tr")
    sign_in(page, server.admin_key, then=f"/queue?status=queued&label=pool%3D{label}")
    expect(page.locator("#total")).to_have_text(page_of(1, 100, 105))
    expect(rows).to_have_count(100)
    expect(rows.first).to_have_attribute("data-job", ids[0])
    expect(page.locator("#newer")).to_be_disabled()

    page.click("#older")
    expect(page.locator("#total")).to_have_text(page_of(101, 105, 105))
    expect(rows).to_have_count(5)
    screenshot(page, "queue-older")
    assert [rows.nth(i).get_attribute("data-job") for i in range(5)] == ids[100:]
    expect(page.locator("#older")).to_be_disabled()
    page.click("#newer")
    expect(page.locator("#total")).to_have_text(page_of(1, 100, 105))
    expect(rows.first).to_have_attribute("data-job", ids[0])

    # A filter starts again at the newest; a page emptied meanwhile (the five newest
    # cancelled, so no longer queued) gives way to the last page that has jobs.
    page.click("#older")
    expect(page.locator("#total")).to_have_text(page_of(101, 105, 105))
    page.fill("#f-q", "j_")
    page.press("#f-q", "Enter")
    expect(page.locator("#total")).to_have_text(page_of(1, 100, 105))
    page.click("#older")
    expect(page.locator("#total")).to_have_text(page_of(101, 105, 105))
    with server.admin() as admin:
        resp = admin.post("/api/queue/cancel", json={"job_ids": ids[:5]})
        assert resp.status_code == 200 and resp.json()["done"] == 5, resp.text
    expect(page.locator("#total")).to_have_text("100 jobs")
    expect(rows.first).to_have_attribute("data-job", ids[5])
    expect(page.locator("#older")).to_be_hidden()  # one page: nothing to page through
    expect(page.locator("#newer")).to_be_hidden()


NAV = [
    "Workers",
    "Train",
    "Queue",
    "Sweeps",
    "Teams",
    "Fleet",
    "Capacity",
    "Secrets",
    "Audit",
    "API keys",
    "Webhooks",
]


def test_at_390_px_every_page_link_shows_and_18_queued_jobs_are_compact_rows(
    server: ServerProcess, page: Page
) -> None:
    """#33.9: at 390 px "API keys" and "Webhooks" were cut off the navigation, and a queued
    job was a ~600 px card (18 jobs: a 10,918 px page)."""
    label = unique("phone")
    ids = waiting_jobs(server, label, 18)
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then=f"/queue?status=queued&label=pool%3D{label}")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(18)
    expect(rows.first).to_have_attribute("data-job", ids[0])

    links = page.locator("nav a")
    expect(links).to_have_text(NAV)
    boxes = [links.nth(i).bounding_box() for i in range(len(NAV))]
    outside = [t for t, b in zip(NAV, boxes, strict=True) if not b or b["x"] + b["width"] > 390]
    assert outside == [], f"nav links beyond the window's right edge: {outside}"
    heights = rows.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")
    whole = page.evaluate("document.documentElement.scrollHeight")
    print(f"\n18 queued jobs at 390 px: rows up to {max(heights):.0f} px, page {whole} px")
    assert max(heights) <= 200, heights
    assert whole <= 5500
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    screenshot(page, "phone-queue-18")

    links.filter(has_text="Webhooks").click()  # reachable: a click away
    expect(page).to_have_url(f"{server.url}/webhooks")
