"""The worker page in Chromium: a real `gpufleet worker` (GPUs from a fake `nvidia-smi` on
its PATH) reports its GPUs and their load; an admin edits its labels and matching uses them."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.browser.test_ui import processes, start_copied_command, worker_row
from tests.e2e.conftest import ServerProcess, unique, wait_job
from tests.waiting import wait_until

__all__ = ["processes"]  # the fixture, used by name

GPU_NAME = "NVIDIA H100 80GB HBM3"
LAPTOP_WIDE = {"width": 1440, "height": 900}
FAKE_SMI = f"""#!/bin/sh
# Two H100s for detection, their load from load.csv beside this script, and the banner.
case "$1" in
  --query-gpu=index,name*)
    echo "0, {GPU_NAME}, 81559, GPU-0000aaaa, 550.90.07"
    echo "1, {GPU_NAME}, 81559, GPU-1111bbbb, 550.90.07" ;;
  --query-gpu=index,utilization*) cat "$(dirname "$0")/load.csv" ;;
  *) echo "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |" ;;
esac
"""


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `nvidia-smi` first on the PATH of the processes the test starts; returns the
    file its load is read from (index, utilisation %, MiB used, MiB total a line)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    load = tools / "load.csv"
    load.write_text("0, 87, 62976, 81559\n1, 3, 410, 81559\n")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return load


def _detail(server: ServerProcess, worker_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        answer = admin.get(f"/api/admin/workers/{worker_id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def _submit(server: ServerProcess, labels: dict[str, str]) -> str:
    with server.admin() as admin:
        answer = admin.post(
            "/api/queue/submit",
            json={
                "config": {"command": ["python", "-c", "print('on the worker page')"]},
                "target": "worker",
                "worker_labels": labels,
            },
        )
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def test_an_admin_opens_a_worker_sees_its_gpus_load_and_history_and_relabels_it(
    server: ServerProcess,
    page: Page,
    tmp_path: Path,
    fake_gpus: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    name, lane = unique("page"), unique("lane")
    with server.admin() as admin:
        created = admin.post("/api/admin/workers", json={"name": name}).json()
    worker_id, token = created["worker_id"], created["token"]
    command = (
        f"gpufleet worker --orchestrator-url {server.url} --worker-token {token} --name {name} "
        f"--persistent --label pool=red --label lane={lane}"
    )
    log = start_copied_command(command, tmp_path / name, processes)
    first_job = _submit(server, {"lane": lane})
    wait_job(server, first_job, "completed")

    # From the list, the worker's name leads to its page.
    sign_in(page, server.admin_key, then="/workers")
    worker_row(page, name).get_by_role("link", name=name).click()
    expect(page).to_have_url(f"{server.url}/workers/{worker_id}")
    expect(page.locator("#name")).to_have_text(name)
    expect(page.locator("#status .badge")).to_have_text("idle")
    expect(page.locator("[data-fact=agent]")).to_have_text("gpufleet 0.1.0")
    expect(page.locator("#facts")).to_contain_text("Connected since")
    expect(page.locator("#gpu-versions")).to_have_text(
        "driver 550.90.07 · CUDA 12.4 · load as of the last heartbeat"
    )
    gpus = page.locator("#gpus tbody tr")
    expect(gpus).to_have_count(2)
    expect(gpus.nth(0)).to_contain_text(GPU_NAME)
    expect(gpus.nth(0)).to_contain_text("80 GB")
    expect(gpus.nth(0).locator("[data-utilization]")).to_have_text("87 %")
    expect(gpus.nth(0).locator("[data-memory-used]")).to_have_text("61.5 / 80 GB")
    history = page.locator(f'#history tr[data-job="{first_job}"]')
    expect(history).to_contain_text("completed")
    expect(history.get_by_role("link", name=first_job)).to_have_attribute(
        "href", f"/queue/{first_job}"
    )
    detail = _detail(server, worker_id)
    assert detail["hostname"] and detail["address"], detail

    # The load follows the heartbeats, with no reload.
    fake_gpus.write_text("0, 42, 20480, 81559\n1, 99, 81000, 81559\n")
    expect(gpus.nth(1).locator("[data-utilization]")).to_have_text("99 %", timeout=20_000)
    expect(gpus.nth(0).locator("[data-memory-used]")).to_have_text("20.0 / 80 GB")

    # A label that is not key=value is refused next to the field; nothing changes.
    page.click("#labels-edit")
    page.fill("#labels-text", "pool blue")
    page.click("#labels-save")
    expect(page.locator("#labels-error")).to_contain_text("is not key=value")
    page.fill("#labels-text", "bad key=x")
    page.click("#labels-save")
    expect(page.locator("#labels-error")).to_contain_text("label key 'bad key' is not valid")
    assert _detail(server, worker_id)["admin_labels"] == {}

    # An admin label wins over the one the worker reports, and matching uses it.
    page.fill("#labels-text", "pool=blue")
    page.click("#labels-save")
    expect(page.locator("#labels-dialog")).to_be_hidden()
    pool = page.locator('#labels li[data-label-key="pool"]')
    expect(pool).to_have_attribute("data-source", "admin")
    expect(pool).to_contain_text("pool=blue")
    expect(pool).to_contain_text("(the worker reports pool=red)")
    detail = _detail(server, worker_id)
    assert detail["labels"] == {"pool": "blue", "lane": lane}
    assert detail["reported_labels"] == {"pool": "red", "lane": lane}
    blue_job = _submit(server, {"pool": "blue", "lane": lane})
    assert wait_job(server, blue_job, "completed")["worker_id"] == worker_id
    expect(page.locator(f'#history tr[data-job="{blue_job}"]')).to_contain_text("completed")
    page.set_viewport_size(LAPTOP_WIDE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "worker")
    with server.admin() as admin:
        events = admin.get("/api/audit", params={"type": "worker.labels_set"}).json()["events"]
    assert any(e["target"] == worker_id and e["detail"]["new"] == {"pool": "blue"} for e in events)

    page.set_viewport_size(PHONE)
    page.reload()
    expect(gpus.nth(1).locator("[data-utilization]")).to_have_text("99 %")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the worker page is {overflow} px wider than a phone screen"
    screenshot(page, "phone-worker")
    assert "registered as" in log.read_text()


def test_a_simpletuner_agent_shows_as_such_with_no_gpu_load(
    server: ServerProcess, page: Page
) -> None:
    """The released agent's shapes (its register and heartbeat bodies, sent as it does)."""
    name = unique("simpletuner")
    with server.admin() as admin:
        created = admin.post("/api/admin/workers", json={"name": name}).json()
    headers = {"X-Worker-Token": created["token"]}
    gpu_info = {"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 80, "count": 1, "driver": "535.1"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as agent:
        registered = agent.post(
            "/api/workers/register",
            json={"name": name, "gpu_info": gpu_info, "persistent": True, "current_job_id": None},
        )
        assert registered.status_code == 200, registered.text
        body = {"worker_id": created["worker_id"], "status": "idle", "current_job_id": None}
        beat = agent.post("/api/workers/heartbeat", json=body)
        assert beat.status_code == 200, beat.text

    sign_in(page, server.admin_key, then=f"/workers/{created['worker_id']}")

    expect(page.locator("[data-fact=agent]")).to_have_text("SimpleTuner agent")
    gpus = page.locator("#gpus tbody tr")
    expect(gpus).to_have_count(1)
    expect(gpus.first).to_contain_text("NVIDIA A100-SXM4-80GB")
    expect(page.locator("#gpus th.usage").first).to_be_hidden()
    expect(page.locator("#gpu-versions")).to_have_text("driver 535.1")
    expect(page.locator("#history")).to_contain_text("No jobs offered to this worker yet.")
    wait_until(
        lambda: _detail(server, created["worker_id"])["gpu_stats"] == [],
        timeout=15,
        message="no load",
    )
