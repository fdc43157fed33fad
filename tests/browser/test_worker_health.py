"""A worker's health in Chromium (docs/workers.md, Health): the Workers list says why a worker
is kept from jobs, its page shows its faulty GPUs and its failing preflight's output."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in
from tests.browser.test_ui import worker_row
from tests.e2e.conftest import ServerProcess, unique

OUTPUT = "checking the scratch disk\nscratch disk not mounted: /scratch is missing\n(exit code 1)"


def test_the_workers_list_and_a_workers_page_show_its_faults_and_failing_preflight(
    server: ServerProcess, page: Page
) -> None:
    name = unique("sick")
    with server.admin() as admin:
        created = admin.post("/api/admin/workers", json={"name": name}).json()
    registered = httpx.post(
        f"{server.url}/api/workers/register",
        headers={"X-Worker-Token": created["token"]},
        json={
            "name": name,
            "gpu_count": 2,
            "gpus": [{"index": 0, "name": "Stub"}, {"index": 1, "name": "Stub"}],
            "gpu_health": [{"index": 0}, {"index": 1, "ecc_uncorrected": 2}],
            "preflight": {"ok": False, "output": OUTPUT},
        },
    )
    assert registered.status_code == 200, registered.text

    sign_in(page, server.admin_key, then="/workers")
    row = worker_row(page, name)
    expect(row.locator("[data-health=preflight]")).to_have_text("preflight fails: (exit code 1)")
    expect(row.locator("[data-health=gpu-fault]")).to_have_text(
        "GPU 1 out: 2 uncorrectable ECC error(s)"
    )
    expect(row.locator(".badge")).to_have_text("unhealthy: its preflight fails")

    row.get_by_role("link", name=name).click()
    expect(page.locator("[data-gpu-fault='1']")).to_contain_text("2 uncorrectable ECC error(s)")
    expect(page.locator("[data-fact=preflight]")).to_have_text(OUTPUT)
