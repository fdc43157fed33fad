"""Train, job and Audit pages in Chromium: long text stays in its box, errors sit beside their
field, advice names buttons and pages, the audit log reads and filters well (#15.4-8)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import PHONE, screenshot, sign_in, train_ready
from tests.e2e.conftest import ServerProcess, unique

DESKTOP = {"width": 1440, "height": 900}
WIDTHS = (DESKTOP, PHONE)  # a page is loaded once and measured at each: they differ in layout
LONG = "x" * 300  # a label with no `=`, or a config value, with nowhere to break


def sideways(page: Page) -> int:
    """How many pixels the page is wider than the window (> 0: it scrolls sideways)."""
    width = "document.scrollingElement.scrollWidth - document.documentElement.clientWidth"
    return int(page.evaluate(width))


def submit(server: ServerProcess, **body: Any) -> str:
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])


def test_a_long_label_error_keeps_the_train_page_within_the_window(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    page.fill("#labels", LONG)
    page.click("#submit")

    for viewport in WIDTHS:
        page.set_viewport_size(viewport)
        expect(page.get_by_role("alert").filter(has_text="is not key=value")).to_be_visible()
        assert sideways(page) <= 0, f"{sideways(page)} px too wide at {viewport['width']} px"
        expect(page.locator("#labels-error")).to_contain_text("is not key=value")  # beside it


def test_a_long_config_line_keeps_the_job_page_within_the_window(
    server: ServerProcess, page: Page
) -> None:
    job_id = submit(
        server,
        config={"model_type": "lora", "note": LONG, "path": "/" + "/".join(["deep"] * 60)},
        worker_labels={"zone": "z" * 120},
    )
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    for viewport in WIDTHS:
        page.set_viewport_size(viewport)
        expect(page.locator("#config")).to_contain_text(LONG)
        expect(page.locator("#waiting-summary")).to_contain_text("zone=")
        assert sideways(page) <= 0, f"{sideways(page)} px too wide at {viewport['width']} px"


def test_save_config_stores_it_and_explains_a_bad_name_or_bad_json_beside_the_field(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    name_error = page.locator("#config-error")

    page.fill("#config-name", "a/b")
    page.click("#config-save")
    expect(name_error).to_contain_text('config name "a/b" is not valid; use letters, digits')
    expect(page.locator("#error")).to_be_hidden()  # beside the field, not in the far banner

    page.fill("#config-json", '{\n  "command": ["python", "train.py"],\n  oops\n}')
    page.fill("#config-name", "fine-name")
    page.click("#config-save")
    json_error = page.locator("#config-json-error")
    expect(json_error).to_contain_text("not valid JSON at line 3, column 3")
    expect(json_error).to_contain_text("fix the JSON and save again")
    expect(json_error).not_to_contain_text("submit again")
    screenshot(page, "train-errors")

    name = unique("saved")
    config = {"command": ["python", "-c", "print(1)"], "env": {"EPOCHS": "3"}}
    page.fill("#config-json", '{"command": ["python", "-c", "print(1)"], "env": {"EPOCHS": "3"}}')
    page.fill("#config-name", name)
    page.click("#config-save")
    expect(page.locator("#config-status")).to_have_text(f"Saved {name}.")
    expect(json_error).to_be_hidden()
    with server.admin() as admin:
        stored = admin.get(f"/api/configs/{name}")
    assert stored.status_code == 200, stored.text
    assert stored.json()["config"] == config
    expect(page.locator("#config-pick")).to_have_value(name)
    screenshot(page, "train-saved")


def test_a_config_typed_before_the_page_script_runs_is_kept(
    server: ServerProcess, page: Page
) -> None:
    # A slow connection: the page shows before its script has run, and a person types.
    held: list[Route] = []
    page.route("**/static/train.js", lambda route: held.append(route))
    sign_in(page, server.admin_key)
    page.goto("/train", wait_until="commit")
    typed = '{"command": ["python", "mine.py"]}'
    page.fill("#config-json", typed)
    assert len(held) == 1
    with page.expect_response("**/api/configs"):  # the script's first request
        held[0].continue_()
    expect(page.locator("#config-json")).to_have_value(typed)  # the example overwrote it


def test_the_train_buttons_wait_for_the_page_script(server: ServerProcess, page: Page) -> None:
    held: list[Route] = []
    page.route("**/static/train.js", lambda route: held.append(route))
    sign_in(page, server.admin_key)
    page.goto("/train", wait_until="commit")
    expect(page.locator("#submit")).to_be_disabled()
    expect(page.locator("#config-save")).to_be_disabled()
    page.press("#config-name", "Enter")  # no native GET of the form before the script runs
    assert page.url.endswith("/train"), page.url
    with page.expect_response("**/api/configs"):
        held[0].continue_()
    expect(page.locator("#submit")).to_be_enabled()
    expect(page.locator("#config-save")).to_be_enabled()


def test_a_save_the_server_refuses_is_explained_beside_save_config(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    page.fill("#config-json", '{"gpu_count": "two"}')
    page.fill("#config-name", unique("refused"))
    page.click("#config-save")
    expect(page.locator("#config-error")).to_contain_text("gpu_count")
    expect(page.locator("#error")).to_be_hidden()


def test_a_gpu_count_other_than_the_configs_is_explained_in_the_pages_terms(
    server: ServerProcess, page: Page
) -> None:
    with server.admin() as admin:
        before = admin.get("/api/queue").json()["total"]
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    page.fill("#config-json", '{"num_processes": 8, "model_type": "lora"}')
    page.fill("#gpu-count", "0")
    page.click("#submit")
    error = page.locator("#error")
    expect(error).to_contain_text("GPU count 0 disagrees with the config's own GPU count")
    expect(error).to_contain_text("set GPU count to 8, or leave it blank")
    with server.admin() as admin:
        assert admin.get("/api/queue").json()["total"] == before


def test_the_waiting_advice_on_the_job_page_names_buttons_not_endpoints(
    server: ServerProcess, page: Page
) -> None:
    job_id = submit(server, config={"model_type": "lora"}, worker_labels={"zone": "io"})
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    summary = page.locator("#waiting-summary")
    expect(summary).to_contain_text("Create Worker on the Workers page")
    expect(summary).not_to_contain_text("/api/")


def test_a_local_job_wanting_more_gpus_than_the_local_runner_is_refused_in_each_surfaces_terms(
    server: ServerProcess,
) -> None:
    # It would wait forever, so it is refused (#33.7); the words are the waiting advice's.
    with server.admin() as admin:
        resp = admin.post(
            "/api/queue/submit",
            json={"config": {"model_type": "lora"}, "target": "local", "gpu_count": 2},
        )
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert re.search(r"the local runner has (no|\d+) GPU", body["detail"])
    ui = body["detail_for"]["ui"]
    assert "GPU count" in ui and "target Worker or Auto" in ui
    assert "Create Worker" not in ui and "/api/" not in ui
    assert "--gpus" in body["detail_for"]["cli"]


def test_an_unknown_job_page_points_at_the_queue_page_not_an_endpoint(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/queue/j_nope")
    said = page.locator("#not-found")
    expect(said).to_contain_text("There is no job j_nope")
    expect(said).to_contain_text("Queue lists the jobs")
    expect(said).not_to_contain_text("/api/")


# ---- Audit (#15.6 actor, #15.8) ------------------------------------------------------------

# For each text node in the Type and Target cells: on how many lines it is drawn. A word
# broken in two is drawn on two.
LINES_PER_WORD = """() => [...document.querySelectorAll(
    '#events td[data-label=Type], #events td[data-label=Target], #events td[data-label=Actor]')]
  .flatMap((td) => {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    const out = [];
    while (walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(walker.currentNode);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      out.push([walker.currentNode.textContent, tops.size]);
    }
    return out;
  })"""


@pytest.fixture
def audited(server: ServerProcess) -> dict[str, str]:
    """A worker created and a job submitted through the API: audit events naming both."""
    with server.admin() as admin:
        worker = admin.post("/api/admin/workers", json={"name": unique("audited")})
        assert worker.status_code == 201, worker.text
    job_id = submit(server, config={"model_type": "lora"}, worker_labels={"zone": "audit"})
    with server.admin() as admin:
        assert admin.post(f"/api/queue/{job_id}/cancel").status_code == 200
    return {"worker_id": worker.json()["worker_id"], "job_id": job_id}


def test_audit_rows_link_jobs_and_workers_name_actors_and_fold_raw_json(
    server: ServerProcess, page: Page, audited: dict[str, str]
) -> None:
    sign_in(page, server.admin_key, then="/audit")
    for viewport in WIDTHS:
        page.set_viewport_size(viewport)
        audit_rows_read_well(
            page, audited, "audit" if viewport is DESKTOP else "phone-audit-polish"
        )

    page.locator(
        f'#events tr[data-event="job.submitted"] a[href="/queue/{audited["job_id"]}"]'
    ).click()
    expect(page).to_have_url(re.compile(f"/queue/{audited['job_id']}$"))


def audit_rows_read_well(page: Page, audited: dict[str, str], shot: str) -> None:
    """Links to the job and the worker, the actor named, the raw JSON folded, no word broken
    and nothing wider than the window, at the page's present width."""
    job_link = page.locator(
        f'#events tr[data-event="job.submitted"] a[href="/queue/{audited["job_id"]}"]'
    )
    expect(job_link).to_have_count(1)
    worker_link = page.locator(
        f'#events tr[data-event="worker.created"] a[href="/workers/{audited["worker_id"]}"]'
    )
    expect(worker_link).to_have_count(1)
    actor = page.locator('#events tr[data-event="worker.created"] td[data-label=Actor] .id').first
    expect(actor).to_have_text("admin")
    expect(actor).to_have_attribute("title", re.compile(r"^key:k_"))
    changed = page.locator('#events tr[data-event="job.status_changed"]').first
    expect(changed.locator(".kv dt").first).to_have_text("old")  # key=value, not raw JSON
    expect(changed.locator("details")).to_have_count(1)
    expect(changed.locator("details pre")).to_be_hidden()  # the raw JSON, folded

    broken = [(text, lines) for text, lines in page.evaluate(LINES_PER_WORD) if lines > 1]
    assert broken == [], f"words broken across lines at {shot}: {broken}"
    assert sideways(page) <= 0, f"{shot}: {sideways(page)} px too wide"
    screenshot(page, shot)


def test_audit_filters_refuse_since_after_until_and_unknown_types_beside_the_filters(
    server: ServerProcess, page: Page, audited: dict[str, str]
) -> None:
    sign_in(page, server.admin_key, then="/audit")
    expect(page.locator("#events tbody tr").first).to_have_attribute("data-event", re.compile("."))
    errors = page.locator("#filter-error")

    page.fill("#f-since", "2026-03-02T10:00:00")
    page.fill("#f-until", "2026-03-01T10:00:00")
    page.click("#filters button[type=submit]")
    expect(errors).to_contain_text("Since is after Until")

    page.click("#clear")
    expect(errors).to_be_hidden()
    page.fill("#f-type", "wrker.")
    page.click("#filters button[type=submit]")
    expect(errors).to_contain_text("unknown event type 'wrker.'")
    expect(page.locator("#error")).to_be_hidden()


def test_the_audit_actor_filter_takes_a_key_name_and_says_when_no_one_has_it(
    server: ServerProcess, page: Page, audited: dict[str, str]
) -> None:
    sign_in(page, server.admin_key, then="/audit?actor=admin")
    actors = page.locator("#events td[data-label=Actor]")
    expect(actors.first).to_have_text("admin")
    assert set(actors.all_inner_texts()) == {"admin"}
    with server.admin() as admin:
        total = admin.get("/api/audit", params={"actor": "admin"}).json()["total"]
    assert total > 0
    expect(page.locator("#total")).to_contain_text(f"of {total} events")

    page.fill("#f-actor", "nobody")
    page.click("#filters button[type=submit]")
    expect(page.locator("#no-events")).to_contain_text("No key, worker or user named 'nobody'")


def test_older_and_newer_page_through_the_audit_log_as_the_api_counts_it(
    server: ServerProcess, page: Page
) -> None:
    """Every button is clicked (#15.1): the audit log's paging."""
    with server.admin() as admin:
        for _ in range(101):  # one more than a page
            name = unique("paged")
            assert admin.put(f"/api/configs/{name}", json={"command": ["true"]}).status_code < 300
        total = admin.get("/api/audit", params={"type": "config.created"}).json()["total"]
    assert total > 100
    sign_in(page, server.admin_key, then="/audit?type=config.created")
    shown = page.locator("#total")
    dash = "\N{EN DASH}"
    expect(shown).to_have_text(f"1{dash}100 of {total} events")
    expect(page.locator("#newer")).to_be_disabled()

    page.click("#older")
    expect(shown).to_have_text(f"101{dash}{min(200, total)} of {total} events")
    expect(page).to_have_url(re.compile(r"offset=100"))
    page.click("#newer")
    expect(shown).to_have_text(f"1{dash}100 of {total} events")


def test_sign_out_ends_the_pages_session(server: ServerProcess, page: Page) -> None:
    """Every button is clicked (#15.1): Sign out."""
    sign_in(page, server.admin_key, then="/queue")
    assert page.request.get("/api/queue").status == 200
    (kept,) = [c["value"] for c in page.context.cookies() if c["name"] == "gpufleet_session"]
    page.click("#signout")
    page.wait_for_url("**/signin**")
    assert page.request.get("/api/queue").status == 401
    # The server ended it: the cookie, kept by someone who copied it, is refused too.
    old_cookie = {"Cookie": f"gpufleet_session={kept}"}
    assert httpx.get(f"{server.url}/api/queue", headers=old_cookie, timeout=10).status_code == 401
    page.goto("/queue")
    page.wait_for_url(re.compile(r"/signin\?next=(/|%2F)queue$"))


def _user_with_key(server: ServerProcess, name: str) -> str:
    with server.admin() as admin:
        made = admin.post("/api/users", json={"name": name, "level": "researcher"})
        assert made.status_code == 201, made.text
        key = admin.post(
            "/api/admin/api-keys",
            json={"name": f"{name}-laptop", "permissions": ["queue.submit"], "user": name},
        )
        assert key.status_code == 201, key.text
    return str(key.json()["key"])


def test_audit_filters_by_a_users_name_names_the_user_and_shows_new_events_live(
    server: ServerProcess, page: Page
) -> None:
    """#33.10: "rita" answered "No key or worker named 'rita'"; no User column; not live.
    Filtered at a phone's width; the rows then measured at 1440 px too."""
    rita = unique("rita")
    key = _user_with_key(server, rita)
    # Jobs no worker takes: a later module's worker on this shared server must not run them.
    nowhere = {"config": {"command": ["true"]}, "worker_labels": {"pool": unique("none")}}
    with httpx.Client(base_url=server.url, headers={"X-API-Key": key}, timeout=10) as client:
        first = client.post("/api/queue/submit", json=nowhere)
        assert first.status_code == 201, first.text
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/audit")
    expect(page.locator("#live")).to_have_text("live")
    page.fill("#f-actor", rita)
    page.click("#filters button[type=submit]")
    rows = page.locator("#events tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td[data-label=User]")).to_have_text(rita)
    expect(rows.first.locator("td[data-label=Actor]")).to_have_text(f"{rita}-laptop")

    with httpx.Client(base_url=server.url, headers={"X-API-Key": key}, timeout=10) as client:
        second = client.post("/api/queue/submit", json=nowhere)
        assert second.status_code == 201, second.text
    expect(rows).to_have_count(2)  # no reload: the page heard of it
    with server.admin() as admin:
        body = admin.get("/api/audit", params={"user": rita}).json()
    assert body["total"] == 2
    assert [e["target"] for e in body["events"]] == [second.json()["id"], first.json()["id"]]
    expect(rows.first.locator("td[data-label=Target]")).to_have_text(second.json()["id"])
    expect(page.locator("#total")).to_have_text(re.compile(r"of 2 events$"))
    for viewport in WIDTHS:
        page.set_viewport_size(viewport)
        expect(rows.first.locator("td[data-label=User]")).to_have_text(rita)
        assert sideways(page) <= 0, f"{sideways(page)} px too wide at {viewport['width']} px"


def test_audit_rows_at_390_px_are_compact_cards(
    server: ServerProcess, page: Page, audited: dict[str, str]
) -> None:
    """#33.9: the Audit page was 29,489 px at 390 px: a field a line made each row tall."""
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/audit")
    rows = page.locator("#events tbody tr[data-event]")
    expect(rows.first).to_be_visible()
    page.wait_for_function("document.querySelector('#events tbody tr').offsetHeight > 0")
    heights = rows.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")
    mean = sum(heights) / len(heights)
    print(f"\n{len(heights)} audit rows at 390 px: mean {mean:.0f}, tallest {max(heights):.0f} px")
    assert mean <= 240, heights
    assert sideways(page) <= 0
