"""A job's stored files and checkpoints on its page (#17): listed live, downloaded by a click
(the bytes checked against the API's sha256), pinned, unpinned and deleted by an admin after
the page's confirmation; a key that may only read sees the files and no admin buttons."""

from __future__ import annotations

import io
import secrets
import tarfile
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.artifact_uploads import Attempt, sha
from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.e2e.conftest import ServerProcess, unique

MODEL = secrets.token_bytes(200_000)
WEIGHTS = secrets.token_bytes(50_000)
RESULT = b'{"loss": 0.25}'


def stored_job(server: ServerProcess) -> Attempt:
    attempt = Attempt(server)
    attempt.checkpoint("checkpoint-20", 20, {"weights.npz": WEIGHTS})
    attempt.upload("output/model.bin", MODEL)
    attempt.upload("output/result.json", RESULT)
    attempt.finish()
    return attempt


def listing(server: ServerProcess, job_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        resp = admin.get(f"/api/queue/{job_id}/artifacts")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())


def row(page: Page, path: str) -> Any:
    return page.locator("#artifacts tbody tr", has=page.locator(f'a:text-is("{path}")'))


def test_the_job_page_lists_files_and_checkpoints_and_a_click_downloads_the_listed_bytes(
    server: ServerProcess, page: Page, tmp_path: Path
) -> None:
    job = stored_job(server)
    listed = {a["path"]: a for a in listing(server, job.job_id)["artifacts"]}
    sign_in(page, server.admin_key, then=f"/queue/{job.job_id}")
    expect(page.locator("#artifacts tbody tr")).to_have_count(3)
    expect(page.locator("#artifacts-total")).to_have_text("3 files, 244.2 KiB")
    model = row(page, "output/model.bin")
    expect(model.locator('td[data-label="Size"]')).to_have_text("195.3 KiB")
    sha_cell = model.locator(".sha")
    expect(sha_cell).to_have_text(sha(MODEL)[:12])
    expect(sha_cell).to_have_attribute("title", listed["output/model.bin"]["sha256"])
    checkpoint = page.locator("#checkpoints tbody tr")
    expect(checkpoint).to_have_count(1)
    expect(checkpoint.locator('td[data-label="Name"]')).to_have_text("checkpoint-20")
    expect(checkpoint.locator('td[data-label="Attempt"]')).to_have_text("1")
    expect(page.locator("#artifacts thead th").first).to_have_text("Attempt")
    expect(page.locator("#checkpoints thead th").first).to_have_text("Attempt")
    expect(checkpoint.locator('td[data-label="Step"]')).to_have_text("20")
    expect(checkpoint.locator('td[data-label="Files"]')).to_have_text("1")
    expect(
        row(page, "output/checkpoint-20/weights.npz").locator('td[data-label="Kind"]')
    ).to_have_text("checkpoint")
    screenshot(page, "job-artifacts")

    with page.expect_download() as download:
        model.locator("a").click()
    saved = tmp_path / "model.bin"
    download.value.save_as(saved)
    assert download.value.suggested_filename == "model.bin"
    assert sha(saved.read_bytes()) == listed["output/model.bin"]["sha256"]

    # A checkpoint is one link: its folder, as one tar holding the listed bytes.
    with page.expect_download() as download:
        checkpoint.get_by_role("link", name="checkpoint-20").click()
    assert download.value.suggested_filename == "checkpoint-20.tar"
    saved = tmp_path / "checkpoint-20.tar"
    download.value.save_as(saved)
    with tarfile.open(fileobj=io.BytesIO(saved.read_bytes())) as tar:
        assert tar.getnames() == ["checkpoint-20/weights.npz"]
        member = tar.extractfile("checkpoint-20/weights.npz")
        assert member is not None
        assert sha(member.read()) == listed["output/checkpoint-20/weights.npz"]["sha256"]


def test_pin_and_unpin_go_through_the_api_and_the_button_says_which_is_next(
    server: ServerProcess, page: Page
) -> None:
    job = stored_job(server)
    sign_in(page, server.admin_key, then=f"/queue/{job.job_id}")
    pin = page.locator("#artifacts-pin")
    expect(pin).to_have_text("Pin")
    pin.click()
    expect(pin).to_have_text("Unpin")
    expect(page.locator("#artifacts-total")).to_contain_text("pinned")
    assert listing(server, job.job_id)["pinned"] is True
    pin.click()
    expect(pin).to_have_text("Pin")
    assert listing(server, job.job_id)["pinned"] is False


def test_delete_asks_first_and_then_the_api_lists_nothing(
    server: ServerProcess, page: Page
) -> None:
    job = stored_job(server)
    sign_in(page, server.admin_key, then=f"/queue/{job.job_id}")
    expect(page.locator("#artifacts tbody tr")).to_have_count(3)

    # One file, from its row: asked, kept on "Keep it", deleted on confirm.
    row(page, "output/result.json").get_by_role("button", name="Delete output/result.json").click()
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-title")).to_have_text("Delete output/result.json?")
    dialog.locator("[data-close]").click()
    expect(dialog).to_be_hidden()
    assert "output/result.json" in {a["path"] for a in listing(server, job.job_id)["artifacts"]}
    row(page, "output/result.json").get_by_role("button", name="Delete output/result.json").click()
    page.click("#confirm-yes")
    expect(page.locator("#artifacts tbody tr")).to_have_count(2)
    assert {a["path"] for a in listing(server, job.job_id)["artifacts"]} == {
        "output/model.bin",
        "output/checkpoint-20/weights.npz",
    }

    # Everything: the dialog says how many; after it, nothing is listed anywhere.
    page.click("#artifacts-delete")
    expect(page.locator("#confirm-text")).to_contain_text("All 2 stored files")
    page.click("#confirm-yes")
    expect(page.locator("#artifacts tbody tr.empty")).to_have_count(1)
    expect(page.locator("#checkpoints tbody tr.empty")).to_have_count(1)
    expect(page.locator("#artifacts-delete")).to_be_hidden()
    after = listing(server, job.job_id)
    assert (after["artifacts"], after["checkpoints"]) == ([], [])


def test_a_reader_sees_and_downloads_the_files_but_no_admin_buttons(
    server: ServerProcess, page: Page, tmp_path: Path
) -> None:
    job = stored_job(server)
    with server.admin() as admin:
        minted = admin.post(
            "/api/admin/api-keys", json={"name": unique("reader"), "permissions": ["queue.read"]}
        )
        assert minted.status_code == 201, minted.text
    sign_in(page, minted.json()["key"], then=f"/queue/{job.job_id}")
    expect(page.locator("#artifacts tbody tr")).to_have_count(3)
    expect(page.locator("#artifacts button")).to_have_count(0)
    expect(page.locator("#artifacts-pin")).to_be_hidden()
    expect(page.locator("#artifacts-delete")).to_be_hidden()
    with page.expect_download() as download:
        row(page, "output/result.json").locator("a").click()
    saved = tmp_path / "result.json"
    download.value.save_as(saved)
    assert saved.read_bytes() == RESULT


def test_files_appear_without_a_reload_when_the_attempt_ends(
    server: ServerProcess, page: Page
) -> None:
    attempt = Attempt(server)
    sign_in(page, server.admin_key, then=f"/queue/{attempt.job_id}")
    expect(page.locator("#artifacts tbody tr.empty")).to_have_text(
        "No files stored yet: they come home when an attempt ends."
    )
    attempt.upload("output/model.bin", MODEL)
    attempt.finish()  # the job's change is what the page hears
    expect(row(page, "output/model.bin")).to_have_count(1)
    expect(page.locator("#artifacts-total")).to_have_text("1 file, 195.3 KiB")


def test_an_ended_job_without_files_says_so_and_offers_no_pin(
    server: ServerProcess, page: Page
) -> None:
    attempt = Attempt(server)
    attempt.finish()
    sign_in(page, server.admin_key, then=f"/queue/{attempt.job_id}")
    expect(page.locator("#status")).to_have_text("completed")

    expect(page.locator("#artifacts tbody tr.empty")).to_have_text(
        "No files are stored for this job: its attempts brought none home, or they were deleted."
    )
    expect(page.locator("#checkpoints tbody tr.empty")).to_have_text("No checkpoints.")
    expect(page.locator("#artifacts-pin")).to_be_hidden()
    expect(page.locator("#artifacts-total")).to_have_text("0 files, 0 B")
    assert listing(server, attempt.job_id)["artifacts"] == []


def test_an_attempt_that_resumed_says_from_which_checkpoint(
    server: ServerProcess, page: Page
) -> None:
    attempt = Attempt(server)
    first = attempt.checkpoint("checkpoint-1200", 1200, {"weights.npz": WEIGHTS})
    assert attempt.preempt()["checkpoint_id"] == first
    attempt.finish()
    sign_in(page, server.admin_key, then=f"/queue/{attempt.job_id}")
    rows = page.locator("#attempts tbody tr")
    expect(rows).to_have_count(2)
    resumed = page.locator("#attempts .resumed")
    expect(resumed).to_have_count(1)
    expect(resumed).to_have_text("resumed from checkpoint-1200 (attempt 1)")
    expect(resumed).to_have_attribute("title", "step 1200")
    numbered = rows.filter(has=page.locator(".resumed")).locator('td[data-label="#"]')
    expect(numbered).to_have_text("2")
    preempted = rows.filter(has_not=page.locator(".resumed")).locator(".badge")
    expect(preempted).to_have_text("preempted")
    expect(preempted).to_have_class("badge status-preempted")


def test_the_artifacts_read_as_cards_on_a_phone(server: ServerProcess, page: Page) -> None:
    job = stored_job(server)
    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then=f"/queue/{job.job_id}")
    link = row(page, "output/model.bin").locator("a")
    expect(link).to_be_visible()
    screenshot(page, "job-artifacts-phone")
    link.scroll_into_view_if_needed()
    box = link.bounding_box()
    assert box is not None, page.locator("#artifacts").inner_html()
    assert box["x"] + box["width"] <= PHONE["width"]
    checkpoint = page.get_by_role("link", name="checkpoint-20", exact=True)
    checkpoint.scroll_into_view_if_needed()
    box = checkpoint.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
