"""The Workers page in Chromium: what it says about each worker, and every action clicked
through its confirmation to its effect, checked through the API (#15.1, #15.3, #15.9, #15.12).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.browser.test_ui import processes, start_copied_command, worker_row
from tests.e2e.conftest import (
    GPUFLEET,
    FakeWorker,
    ServerProcess,
    job_state,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until

WIDE = {"width": 1440, "height": 900}

__all__ = ["processes"]  # the fixture, shared with test_ui


def worker(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.admin() as admin:
        listed = admin.get("/api/admin/workers").json()["workers"]
    (found,) = [w for w in listed if w["name"] == name]
    return found


def copy(page: Page, button: str) -> None:
    page.click(button)
    expect(page.locator("#copied")).to_have_text("Copied to the clipboard.")


def create_in_the_dialog(page: Page, name: str, *, persistent: bool = True) -> str:
    """Create Worker filled in and submitted; the token it shows, once."""
    page.click("#create-open")
    page.fill("#w-name", name)
    page.check(f"input[name=worker_type][value={'persistent' if persistent else 'ephemeral'}]")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#secret")).to_be_visible()
    token = page.locator("#secret-token").inner_text()
    assert token.startswith("wt_")
    return token


def test_a_worker_is_created_run_drained_rotated_and_deleted_through_each_confirmation(
    server: ServerProcess,
    page: Page,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    name = unique("retire")
    sign_in(page, server.admin_key, then="/workers")
    token = create_in_the_dialog(page, name)
    copy(page, "#copy-command")
    command = page.evaluate("navigator.clipboard.readText()")
    page.click("#secret-done")  # copied: it closes at once
    expect(page.locator("#secret")).to_be_hidden()

    # Never started: it says so, with no uptime (#15.3).
    row = worker_row(page, name)
    expect(row).to_have_attribute("data-presence", "never_connected")
    expect(row.locator(".badge")).to_have_text("never connected")
    expect(row.locator('[data-label="Uptime"]')).to_have_text("—")

    start_copied_command(command, tmp_path / name, processes)
    expect(row).to_have_attribute("data-status", "idle", timeout=20_000)
    expect(row.locator('[data-label="Uptime"] [data-since]')).to_have_count(1)
    screenshot(page, "workers")

    # Drain, through its confirmation.
    row.locator("[data-action=drain]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Drain {name}?")
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-status", "draining")
    assert worker(server, name)["drained"] is True
    expect(row.locator("[data-action=delete]")).to_have_count(0)  # it is connected

    # Rotate token: the old token is refused, the new one accepted, and the page says the
    # worker is awaited instead of "connecting" with a running uptime (#15.3).
    row.locator("[data-action=rotate]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Rotate the token of {name}?")
    page.click("#confirm-yes")
    expect(page.locator("#secret")).to_be_visible()
    rotated = page.locator("#secret-token").inner_text()
    assert rotated.startswith("wt_") and rotated != token
    expect(page.locator("#secret-command")).to_contain_text(f"--orchestrator-url {server.url}")
    copy(page, "#copy-token")
    assert page.evaluate("navigator.clipboard.readText()") == rotated
    page.click("#secret-done")
    expect(page.locator("#secret")).to_be_hidden()
    expect(row).to_have_attribute("data-presence", "token_rotated", timeout=20_000)
    expect(row.locator(".badge")).to_have_text("token rotated, waiting for the worker")
    expect(row.locator('[data-label="Uptime"]')).to_have_text("—")
    screenshot(page, "workers-token-rotated")
    old = httpx.post(
        f"{server.url}/api/workers/heartbeat", headers={"X-Worker-Token": token}, json={}
    )
    assert old.status_code == 401
    new = httpx.post(
        f"{server.url}/api/workers/register",
        headers={"X-Worker-Token": rotated},
        json={"name": name, "gpu_count": 0},
    )
    assert new.status_code == 200, new.text
    assert new.json()["worker_id"] == worker(server, name)["id"]
    processes[0].kill()  # the agent that held the old token, if it has not exited

    # Delete, once it is offline (silent past the heartbeat timeout).
    expect(row).to_have_attribute("data-status", "offline", timeout=20_000)
    row.locator("[data-action=delete]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Delete {name}?")
    page.click("#confirm-yes")
    expect(row).to_have_count(0)
    with server.admin() as admin:
        names = [w["name"] for w in admin.get("/api/admin/workers").json()["workers"]]
    assert name not in names


def test_drain_asks_first_and_cancel_leaves_the_worker_taking_jobs(
    server: ServerProcess, page: Page
) -> None:
    """#15.9: one click drained a worker, though the README promised a confirmation."""
    sign_in(page, server.admin_key, then="/workers")
    row = worker_row(page, "local")
    expect(row).to_have_attribute("data-status", "idle", timeout=20_000)

    row.locator("[data-action=drain]").click()
    expect(page.locator("#confirm")).to_contain_text("Drain local?")
    expect(page.locator("#confirm")).to_contain_text("takes no new jobs until you undrain it")
    page.locator("#confirm [data-close]").click()
    expect(page.locator("#confirm")).to_be_hidden()
    assert worker(server, "local")["drained"] is False
    row.locator("[data-action=drain]").click()
    page.click("#confirm-yes")
    expect(row).to_have_attribute("data-status", "draining")
    assert worker(server, "local")["drained"] is True
    row.locator("[data-action=undrain]").click()  # undoing a drain needs no confirmation
    expect(row).to_have_attribute("data-status", "idle")
    assert worker(server, "local")["drained"] is False


def test_the_token_dialog_does_not_lose_an_uncopied_token_to_esc_or_done(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/workers")
    token = create_in_the_dialog(page, unique("esc"))
    secret = page.locator("#secret")
    unsaved = page.locator("#secret-unsaved")

    page.keyboard.press("Escape")
    expect(unsaved).to_be_visible()
    expect(unsaved).to_contain_text("You have not copied the token; close anyway?")
    expect(secret).to_be_visible()
    expect(page.locator("#secret-token")).to_have_text(token)
    screenshot(page, "workers-token-unsaved")
    page.click("#secret-keep")
    expect(unsaved).to_be_hidden()
    expect(secret).to_be_visible()

    page.click("#secret-done")
    expect(unsaved).to_be_visible()
    page.click("#secret-discard")
    expect(secret).to_be_hidden()
    expect(page.locator("#secret-token")).to_have_text("")  # gone from the page

    create_in_the_dialog(page, unique("esc"))
    copy(page, "#copy-command")
    page.keyboard.press("Escape")  # copied: Esc closes it
    expect(secret).to_be_hidden()

    create_in_the_dialog(page, unique("esc"))
    page.locator("#secret-token").select_text()
    page.keyboard.press("Control+C")  # copied by hand, as when the clipboard is refused
    page.keyboard.press("Escape")
    expect(secret).to_be_hidden()


def test_create_worker_pastes_the_address_the_operator_picks_and_a_command_that_runs_here(
    server: ServerProcess, page: Page
) -> None:
    sign_in(page, server.admin_key, then="/workers")
    with server.admin() as admin:
        where = admin.get("/api/admin/orchestrator").json()
    assert where["public_url"] == server.url  # --host 127.0.0.1: reached on this machine only
    page.click("#create-open")
    expect(page.locator("#w-url")).to_have_value(server.url)
    expect(page.locator("#w-urls option").first).to_have_attribute("value", server.url)
    expect(page.locator("#w-url-hint")).to_contain_text("--host 0.0.0.0")
    page.fill("#w-name", unique("addr"))

    page.fill("#w-url", "ftp://gpu-head:8001")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#create-error")).to_contain_text("must be an http(s) URL")
    page.fill("#w-url", "http://10.20.30.40:9000/")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#secret")).to_be_visible()

    command = page.locator("#secret-command")
    expect(command).to_contain_text("--orchestrator-url http://10.20.30.40:9000 ")
    assert shlex.split(command.inner_text())[:2] == ["gpufleet", "worker"]
    page.check("input[name=run_with][value=here]")
    here = shlex.split(command.inner_text())
    assert here[0] == where["gpufleet"] and here[1] == "worker"
    assert Path(here[0]).is_absolute() and Path(here[0]).is_file()
    expect(page.locator("#own-gpufleet")).to_have_text(where["gpufleet"])
    screenshot(page, "workers-create-command")
    copy(page, "#copy-command")
    page.click("#secret-done")

    # The address chosen is kept for the next worker (and for Rotate token).
    page.click("#create-open")
    expect(page.locator("#w-url")).to_have_value("http://10.20.30.40:9000")


def sideways(page: Page, dialog: str) -> tuple[int, int]:
    """How far the page, and the dialog, scroll sideways (0 or less: not at all)."""
    return (
        page.evaluate("document.documentElement.scrollWidth - window.innerWidth"),
        page.evaluate(f"(d => d.scrollWidth - d.clientWidth)(document.querySelector('{dialog}'))"),
    )


def test_the_create_and_token_dialogs_fit_a_phone_screen(server: ServerProcess, page: Page) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/workers")
    page.click("#create-open")
    expect(page.locator("#w-url-hint")).not_to_be_empty()
    created = sideways(page, "#create")
    screenshot(page, "phone-workers-create")
    page.click("#create [data-close]")
    create_in_the_dialog(page, unique("phone"))
    page.check("input[name=run_with][value=here]")
    page.click("#secret-done")
    expect(page.locator("#secret-unsaved")).to_be_visible()

    token = sideways(page, "#secret")
    screenshot(page, "phone-workers-token")

    assert max(created) <= 0, created
    assert max(token) <= 0, token


def running(server: ServerProcess, agent: FakeWorker, job_id: str) -> str:
    """The job's next offer to `agent` acknowledged and running; its attempt's id."""
    assert agent.stream is not None
    attempt: str = agent.stream.next("job_submit")["attempt_id"]
    for step in ("acknowledged", "running"):
        answer = agent.report(job_id, step, attempt_id=attempt)
        assert answer.status_code == 200, answer.text
    return attempt


def open_stream(server: ServerProcess, agent: FakeWorker) -> socket.socket:
    """The worker's event stream on a bare socket, which closes its connection at once when
    closed (as a killed agent's does); returned once the stream says `connected`."""
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    conn.sendall(
        f"GET /api/workers/stream?worker_id={agent.id} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"X-Worker-Token: {agent.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    said = b""
    while b'"connected"' not in said:
        chunk = conn.recv(4096)
        assert chunk, f"the stream ended: {said!r}"
        said += chunk
    return conn


def at(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def test_a_worker_whose_stream_dies_mid_job_says_so_at_once_and_its_attempt_ends_when_last_heard(
    server: ServerProcess, page: Page
) -> None:
    """#33.3: busy, running and "following" until the heartbeat timeout, then "Ran" to the
    sweep. The stream closes as a killed agent's does; its heartbeats go on a while (as a
    wedged agent's would), so the page is looked at before the sweep, with no race."""
    tag = {"lane": unique("dead")}
    name = unique("dead")
    agent = FakeWorker(server, name, labels=tag)
    agent.register(labels=tag)
    stream = open_stream(server, agent)
    job_id = submit_job(server, tag, ["sleep", "600"])
    attempt = wait_job(server, job_id, "offered")["current_attempt_id"]
    for step in ("acknowledged", "running"):
        assert agent.report(job_id, step, attempt_id=attempt).status_code == 200
    agent.keep_alive(every=0.3)
    sign_in(page, server.admin_key, then="/workers")
    page.set_viewport_size(WIDE)
    row = worker_row(page, name)
    expect(row).to_have_attribute("data-presence", "busy")

    stream.close()  # its connection gone, as with kill -9
    expect(row).to_have_attribute("data-presence", "disconnected")
    expect(row.locator(".badge")).to_have_text("disconnected, waiting for it to reconnect")
    expect(row.locator("[data-due=requeue]")).to_contain_text(f"its job {job_id} is requeued at")
    seen = worker(server, name)
    assert seen["presence"] == "disconnected" and seen["requeue_due"] is not None
    assert at(seen["requeue_due"]) > at(seen["last_heartbeat"])
    screenshot(page, "workers-stream-gone")

    page.goto(f"/queue/{job_id}")
    expect(page.locator("#unheard")).to_contain_text("the job is requeued at")
    expect(page.locator("#log-state")).to_have_text(re.compile(r"^stalled: the worker is "))
    expect(page.locator("#status .badge")).to_have_text("running")
    with server.admin() as admin:
        unheard = admin.get(f"/api/queue/{job_id}").json()["worker_unheard"]
    assert unheard["presence"] == "disconnected" and unheard["requeue_due"]

    agent.close()  # silent now: the sweep loses its attempt a heartbeat timeout later
    wait_job(server, job_id, "queued")
    expect(page.locator("#unheard")).to_be_hidden()
    (lost,) = job_state(server, job_id)["attempt_history"]
    last_heard = worker(server, name)["last_heartbeat"]
    assert lost["status"] == "lost"
    assert at(lost["ended_at"]) == at(last_heard), (lost["ended_at"], last_heard)
    expect(page.locator("#facts dt", has_text="Last attempt")).to_have_count(1)


def test_a_never_connected_worker_is_counted_as_such_in_one_colour_and_never_lost(
    server: ServerProcess, page: Page
) -> None:
    """#33.11: counted "offline" by the chips and the CLI while its row said "never
    connected", in two colours, and logged as lost for a heartbeat it never had."""
    idle = unique("awaited")
    with server.admin() as admin:
        assert admin.post("/api/admin/workers", json={"name": idle}).status_code == 201
    silent = FakeWorker(server, unique("silent"))
    silent.register()  # registered, then silent: lost a heartbeat timeout later
    wait_until(
        lambda: worker(server, silent_name(server, silent.id))["status"] == "offline",
        timeout=20,
        message="the silent worker to be lost",
    )
    # The sweep that lost it passed the never-connected one too.
    awaited = worker(server, idle)
    assert awaited["status"] != "offline" and awaited["presence"] == "never_connected"
    assert f"worker {idle} lost" not in server.log_path.read_text()

    sign_in(page, server.admin_key, then="/workers")
    with server.admin() as admin:
        body = admin.get("/api/admin/workers").json()
    never = [w for w in body["workers"] if w["presence"] == "never_connected"]
    assert body["counts"]["never_connected"] == len(never) >= 1
    chip = page.locator('[data-count="never_connected"]')
    expect(chip).to_have_text(f"never connected {len(never)}")
    badge_class = worker_row(page, idle).locator(".badge").get_attribute("class")
    assert badge_class == chip.get_attribute("class") == "badge status-connecting"
    listed = subprocess.run(
        [GPUFLEET, "workers", "list"],
        env={**os.environ, "GPUFLEET_URL": server.url, "GPUFLEET_API_KEY": server.admin_key},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The counts' line (a note on jobs no worker can run may follow it: the server is shared
    # with other modules' tests).
    # Rows say "never connected" too: the counts' line is the one that starts "N workers:".
    summary = next((x for x in listed.stdout.splitlines() if re.match(r"\d+ workers?: ", x)), "")
    assert f"{len(never)} never connected" in summary, listed.stdout

    # A name with a space is refused, in the dialog, with the rule; nothing is created.
    page.click("#create-open")
    page.fill("#w-name", "gpu worker 1")
    page.click("#create-form button[type=submit]")
    expect(page.locator("#create-error")).to_contain_text(
        "worker name 'gpu worker 1' is not valid; use letters, digits"
    )
    with server.admin() as admin:
        refused = admin.post("/api/admin/workers", json={"name": "gpu worker 1"})
        names = [w["name"] for w in admin.get("/api/admin/workers").json()["workers"]]
    assert refused.status_code == 422 and "gpu worker 1" not in names


def silent_name(server: ServerProcess, worker_id: str) -> str:
    with server.admin() as admin:
        answer = admin.get(f"/api/admin/workers/{worker_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["name"])


def test_a_workers_page_drains_rotates_and_deletes_it_at_1440_and_390_px(
    server: ServerProcess, page: Page
) -> None:
    """#33.12: a worker's page had no Drain, Rotate or Delete."""
    name = unique("own-page")
    with server.admin() as admin:
        worker_id = admin.post("/api/admin/workers", json={"name": name}).json()["worker_id"]
    sign_in(page, server.admin_key, then=f"/workers/{worker_id}")
    page.set_viewport_size(WIDE)
    actions = page.locator("#actions")
    actions.locator("[data-action=drain]").click()
    expect(page.locator("#confirm")).to_contain_text(f"Drain {name}?")
    page.click("#confirm-yes")
    expect(actions.locator("[data-action=undrain]")).to_be_visible()
    assert worker(server, name)["drained"] is True
    screenshot(page, "worker-actions")

    page.set_viewport_size(PHONE)
    actions.locator("[data-action=rotate]").click()
    page.click("#confirm-yes")
    expect(page.locator("#secret")).to_be_visible()
    expect(page.locator("#secret-command")).to_contain_text(f"--name {name}")
    token = page.locator("#secret-token").inner_text()
    copy(page, "#copy-token")
    page.click("#secret-done")
    beat = httpx.post(
        f"{server.url}/api/workers/register",
        headers={"X-Worker-Token": token},
        json={"name": name, "gpu_count": 0},
    )
    assert beat.status_code == 200, beat.text  # the new token works
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the worker page is {overflow} px wider than a phone screen"
    screenshot(page, "phone-worker-actions")

    # Registered and silent: deletable once offline; Delete leads back to the Workers page.
    expect(page.locator("#status .badge")).to_have_text("offline", timeout=20_000)
    delete = actions.locator("[data-action=delete]")
    delete.click()
    expect(page.locator("#confirm")).to_contain_text(f"Delete {name}?")
    page.click("#confirm-yes")
    page.wait_for_url(f"{server.url}/workers")
    with server.admin() as admin:
        assert admin.get(f"/api/admin/workers/{worker_id}").status_code == 404


def test_worker_names_lead_to_their_pages_and_a_resumed_job_shows_no_error(
    server: ServerProcess, page: Page
) -> None:
    """#33.12: names not links, ids where names exist (`jobs watch`, a cancel's error), and
    a job running again after a preemption showed its note as an "Error"."""
    tag = {"lane": unique("resume")}
    name, spare = unique("resume"), unique("spare")
    agent = FakeWorker(server, name, labels=tag)
    agent.register(labels=tag)
    agent.connect()
    # It beats until its machine goes away: `jobs watch` may take longer than a heartbeat
    # timeout to start on a loaded machine, and a silent worker's attempt would end as lost.
    agent.keep_alive()
    job_id = submit_job(server, tag, ["sleep", "600"], retry_on=["lost"])
    first = running(server, agent, job_id)
    env = {**os.environ, "GPUFLEET_URL": server.url, "GPUFLEET_API_KEY": server.admin_key}
    watch = subprocess.Popen(
        [GPUFLEET, "jobs", "watch", job_id],
        env={**env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert watch.stdout is not None
    said = [watch.stdout.readline()]  # it has seen attempt 1 run before the preemption
    with server.admin() as admin:  # its machine goes away: the job resumes on another
        assert admin.post(f"/api/admin/workers/{agent.id}/drain").status_code == 200
    assert agent.report(job_id, "preempted", attempt_id=first).status_code == 200
    agent.close()
    other = FakeWorker(server, spare, labels=tag)
    other.register(labels=tag)
    other.connect()
    other.keep_alive()
    running(server, other, job_id)
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    page.set_viewport_size(WIDE)
    expect(page.locator("#status .badge")).to_have_text("running")
    expect(page.locator("#facts [data-fact=note]")).to_contain_text("attempt 1 preempted")
    expect(page.locator("#facts dt", has_text="Error")).to_have_count(0)
    link = page.locator("#facts").get_by_role("link", name=spare)
    expect(link).to_have_attribute("href", f"/workers/{other.id}")
    attempts = page.locator("#attempts")
    expect(attempts.get_by_role("link", name=name)).to_have_attribute(
        "href", f"/workers/{agent.id}"
    )
    screenshot(page, "job-resumed")

    page.set_viewport_size(PHONE)
    page.goto(f"/queue?q={job_id}")
    queue_link = page.locator(f'tr[data-job="{job_id}"]').get_by_role("link", name=spare)
    queue_link.click()
    expect(page).to_have_url(f"{server.url}/workers/{other.id}")
    screenshot(page, "phone-worker-from-queue")

    with server.admin() as admin:
        cancelled = admin.post(f"/api/queue/{job_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    rest, _ = watch.communicate(timeout=60)
    out = said[0] + rest
    other.close()
    history = job_state(server, job_id)["attempt_history"]
    assert history[-1]["error"] == "cancelled by admin", history[-1]
    assert f"running on {name} (attempt 1)" in out, out
    assert f"running on {spare} (attempt 2)" in out, out
    assert agent.id not in out and other.id not in out and "key:" not in out, out


def test_at_390_px_a_workers_labels_sit_side_by_side_beside_their_caption(
    server: ServerProcess, page: Page
) -> None:
    """#33.9: a worker's second label chip sat under the "Labels" caption, in its column."""
    name = unique("chips")
    with server.admin() as admin:
        made = admin.post(
            "/api/admin/workers", json={"name": name, "labels": {"zone": "eu1", "rack": "r12"}}
        )
        assert made.status_code == 201, made.text
        listed = admin.get(f"/api/admin/workers/{made.json()['worker_id']}").json()
    assert listed["labels"] == {"zone": "eu1", "rack": "r12"}
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then="/workers")
    chips = page.locator(f'tr:has(a:text-is("{name}")) td[data-label=Labels] .label')
    expect(chips).to_have_count(2)
    # Measured in one go: the live page may draw its rows again between two reads.
    first, second = chips.evaluate_all(
        "cs => cs.map(c => { const r = c.getBoundingClientRect(); return [r.x, r.y, r.width]; })"
    )
    assert abs(first[1] - second[1]) < 2, (first, second)  # on one line
    assert second[0] >= first[0] + first[2], (first, second)
