"""A sweep's page in Chromium (#38 part 3): its jobs' table sorted by a metric's header, every
job's curve of the metric picked, linked from its jobs' pages and the Sweeps list; Cancel
sweep clicked, then checked through the API; a viewer is shown no Cancel."""

from __future__ import annotations

import sys
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import LAPTOP, PHONE, screenshot, sign_in
from tests.browser.test_sharing import admin_call, as_key, sign_out, user_with_key
from tests.e2e.conftest import ServerProcess, unique
from tests.waiting import wait_until

READ_SUBMIT = ("queue.read", "queue.submit")
# Two steps of a loss and an accuracy made of the point's values: loss = lr * batch / step.
REPORT = (
    "import json, os; f = open(os.environ['GPUFLEET_PROGRESS_FILE'], 'a'); "
    "[f.write(json.dumps(dict(step=s, total=2, metrics=dict(loss={lr} * {batch} / s, "
    "acc=1 - {lr} / s))) + '\\n') for s in (1, 2)]; f.close()"
)


def ran_sweep(server: ServerProcess) -> dict[str, Any]:
    """A 2x2 sweep on the orchestrator's local runner, once all four jobs completed."""
    body = {
        "config": {"command": [sys.executable, "-c", REPORT]},
        "target": "local",
        "sweep": {"lr": [0.5, 0.25], "batch": [2, 4]},
    }
    made = admin_call(server, "POST", "/api/queue/submit", json=body)

    def ended() -> dict[str, Any] | None:
        found: dict[str, Any] = admin_call(server, "GET", f"/api/sweeps/{made['id']}")
        return found if found["status"] not in ("queued", "running") else None

    sweep = wait_until(ended, timeout=60, message=f"sweep {made['id']} to end")
    assert sweep["status"] == "completed", sweep
    return sweep


def test_the_sweep_page_sorts_by_a_metric_and_draws_every_jobs_curve(
    server: ServerProcess, page: Page
) -> None:
    sweep = ran_sweep(server)
    by_loss = sorted(sweep["jobs"], key=lambda j: j["metrics"]["loss"])
    sign_in(page, server.admin_key, then="/sweeps")
    page.locator(f'#sweeps tr[data-sweep="{sweep["id"]}"] a').click()
    expect(page.locator("#status")).to_have_text("completed")
    rows = page.locator("#sweep-jobs tbody tr")
    expect(rows).to_have_count(4)

    page.click('#sweep-jobs th [data-sort="metric:loss"]')

    expect(page.locator('#sweep-jobs th[data-col="metric:loss"]')).to_have_attribute(
        "aria-sort", "ascending"
    )
    order = [rows.nth(i).get_attribute("data-job") for i in range(4)]
    assert order == [j["job_id"] for j in by_loss]
    page.click('#sweep-jobs th [data-sort="metric:loss"]')  # again: the other way
    expect(rows.first).to_have_attribute("data-job", by_loss[-1]["job_id"])
    expect(rows.first.locator('[data-col="metric:loss"]')).to_have_text("1")

    chart = page.locator("#curves figure.chart")
    expect(chart).to_have_attribute("data-series", "loss")  # loss first, when reported
    screenshot(page, "sweep-page")
    page.select_option("#metric", "acc")
    expect(chart).to_have_attribute("data-series", "acc")
    expect(chart.locator("path.line")).to_have_count(4)
    with server.admin() as admin:
        curves = admin.get(f"/api/sweeps/{sweep['id']}/progress?metric=acc").json()
    drawn = chart.locator("path.line").evaluate_all("els => els.map(e => e.dataset.line)")
    assert [d.split()[0] for d in drawn] == [c["job_id"] for c in curves["curves"]]
    assert chart.locator("svg").get_attribute("data-points") == str(
        sum(len(c["points"]) for c in curves["curves"])
    )
    page.set_viewport_size(PHONE)
    page.reload()
    expect(rows).to_have_count(4)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the sweep page is {overflow} px wider than a phone screen"
    page.set_viewport_size(LAPTOP)

    page.goto(f"/queue/{by_loss[0]['job_id']}")  # each job links back to its sweep
    page.click("#sweep-link")
    expect(page).to_have_url(f"{server.url}/sweeps/{sweep['id']}")
    page.goto("/sweeps/s_nope")
    expect(page.locator("#not-found")).to_contain_text(
        "There is no sweep s_nope: the address is mistyped. Sweeps lists the sweeps"
    )


def test_cancel_sweep_cancels_all_its_jobs_and_a_viewer_is_shown_no_cancel(
    server: ServerProcess, page: Page
) -> None:
    _, vera_key = user_with_key(server, "viewer", *READ_SUBMIT)
    body = {
        "config": {"command": ["python", "train.py", "--lr", "{lr}"]},
        "worker_labels": {"pool": unique("none")},  # no worker: they wait
        "sweep": {"lr": [1, 2, 3]},
    }
    made = admin_call(server, "POST", "/api/queue/submit", json=body)

    sign_in(page, vera_key, then=f"/sweeps/{made['id']}")
    expect(page.locator("#status")).to_have_text("queued")
    expect(page.locator("#sweep-jobs tbody tr")).to_have_count(3)
    expect(page.locator("#cancel")).to_be_hidden()
    with as_key(server, vera_key) as vera:  # and the API refuses her too
        assert vera.post(f"/api/sweeps/{made['id']}/cancel").status_code == 403
    sign_out(page)

    sign_in(page, server.admin_key, then=f"/sweeps/{made['id']}")
    page.click("#cancel")
    page.click("#confirm-yes")

    expect(page.locator("#status")).to_have_text("cancelled")
    with server.admin() as admin:
        after = admin.get(f"/api/sweeps/{made['id']}").json()
    assert after["counts"] == {"cancelled": 3}
    assert {
        admin_call(server, "GET", f"/api/queue/{j['job_id']}")["status"] for j in after["jobs"]
    } == {"cancelled"}
    expect(page.locator("#rerun")).to_be_visible()
