"""Training charts on the job page, in Chromium: the example training job's loss and lr over
its steps, with step / total, rate and ETA, live, at laptop and phone widths."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.browser.test_ui import TRAINING
from tests.e2e.conftest import ServerProcess

DESKTOP = {"width": 1440, "height": 900}
STEPS = 300  # long enough (about 6 s) to watch it run, and to see points arrive
EVERY = STEPS // 50  # the example reports every 6th step: 50 points, several a relay
LOSS = 'figure.chart[data-series="loss"] svg'


def training_job(server: ServerProcess, command: list[str] | None = None) -> str:
    if command is None:
        command = [str(arg) for arg in TRAINING["command"]]
        command[command.index("--steps") + 1] = str(STEPS)
    config = {**TRAINING, "command": command}
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json={"config": config, "target": "local"})
        assert resp.status_code == 201, resp.text
        job_id: str = resp.json()["id"]
    return job_id


def test_the_job_page_charts_the_training_metrics_with_step_rate_and_eta(
    server: ServerProcess, page: Page
) -> None:
    page.set_viewport_size(DESKTOP)
    job_id = training_job(server)
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")

    # While it runs: a loss chart that grows without a reload, step / total, rate and ETA.
    expect(page.locator(LOSS)).to_be_visible(timeout=30_000)
    first = int(page.locator(LOSS).get_attribute("data-points") or 0)
    expect(page.locator("#pace-step")).to_have_text(re.compile(rf"^\d+ / {STEPS}$"))
    expect(page.locator("#pace-rate")).to_have_text(re.compile(r"^[\d.e+]+ steps/s$"))
    expect(page.locator("#pace-eta")).to_have_text(re.compile(r"^\d+ (s|min)"))
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel).dataset.points) > n", arg=[LOSS, first]
    )
    screenshot(page, "job-charts-running")

    # Once it has ended: every stored point is drawn, and the API agrees with the page.
    expect(page.locator("#status")).to_have_text("completed", timeout=60_000)
    with server.admin() as admin:
        history = admin.get(f"/api/queue/{job_id}/progress").json()
    series = {s["name"]: s["points"] for s in history["series"]}
    assert {"loss", "accuracy", "lr"} <= set(series)
    assert history["step"] == history["total"] == STEPS
    # Every point the job reported, from its first: the worker relays them all, batched.
    assert [p[0] for p in series["loss"]] == list(range(EVERY, STEPS + 1, EVERY))
    assert series["loss"][0][1] > series["loss"][-1][1]  # it learned
    expect(page.locator(LOSS)).to_have_attribute("data-points", str(len(series["loss"])))
    expect(page.locator(f"{LOSS} .line")).to_have_count(1)
    expect(page.locator('figure.chart[data-series="lr"] .latest')).to_have_text("0.5")
    expect(page.locator("#pace-step")).to_have_text(f"{STEPS} / {STEPS}")
    expect(page.locator("#pace-eta")).to_have_text("done")
    screenshot(page, "job-charts")

    page.set_viewport_size(PHONE)
    page.reload()
    expect(page.locator(LOSS)).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the job page is {overflow} px wider than a phone screen"
    box = page.locator(LOSS).bounding_box()
    assert box is not None and box["width"] <= PHONE["width"]
    screenshot(page, "phone-job-charts")


def test_a_chart_of_one_point_reads_from_zero_in_whole_steps(
    server: ServerProcess, page: Page
) -> None:
    once = "from gpufleet.progress import report; report(step=32, total=300, loss=0.99)"
    job_id = training_job(server, ["python", "-c", once])
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    expect(page.locator("#status")).to_have_text("completed", timeout=60_000)
    expect(page.locator(LOSS)).to_have_attribute("data-points", "1")

    ticks = page.locator(f"{LOSS} .tick").all_text_contents()

    assert ticks == ["0.99", "0", "step 0", "32"]  # not 0.891 to 1.089, not step 28.8
    label = page.locator(LOSS).get_attribute("aria-label")
    assert label == "loss over steps 0 to 32: latest 0.99 at step 32"
