"""A job's code on its page and the Train page (#34): the Code panel lists the snapshot a
job's config names and shows a small text file on click, with its requirements and setup; the
Train page submits a stored snapshot, checked first; another team's viewer cannot read it."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from playwright.sync_api import Page, expect

from gpufleet.artifacts.workdir_archive import pack
from tests.browser.conftest import PHONE, screenshot, sign_in, train_ready
from tests.e2e.conftest import Member, ServerProcess, job_state, unique

TRAIN_PY = "import sys\nprint('training from the snapshot', sys.argv)\n"


def stored_snapshot(server: ServerProcess, tmp_path: Path, by: Member | None = None) -> str:
    """A snapshot with a long path, stored through the API by `by` (the admin by default),
    who may then name it in a job (docs/security.md): its digest."""
    root = tmp_path / unique("tree")
    deep = "configs/" + "very-long-folder-name-" * 4 + "/settings.yaml"
    (root / deep).parent.mkdir(parents=True)
    (root / deep).write_text("lr: 0.001\n")
    (root / "train.py").write_text(TRAIN_PY + f"# {unique('x')}\n")
    (root / "weights.bin").write_bytes(b"\x00\xff" * 64)
    out = io.BytesIO()
    pack(root, ["train.py", deep, "weights.bin"], out)
    body = out.getvalue()
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    with by.client() if by is not None else server.admin() as client:
        assert client.put(f"/api/workdirs/{digest}", content=body).status_code == 201
    return digest


def test_the_code_panel_shows_a_file_on_click_and_another_team_cannot_read_it(
    server: ServerProcess, page: Page, tmp_path: Path
) -> None:
    owner = Member(server, "vision", "researcher")
    digest = stored_snapshot(server, tmp_path, by=owner)
    job = owner.submit(
        {"gpu": "none"},
        ["python", "train.py"],
        config={"workdir": digest, "requirements": "numpy==2.1.0\n", "setup": "make data"},
    )
    page.set_viewport_size(PHONE)
    sign_in(page, owner.key, then=f"/queue/{job['id']}")
    panel = page.locator("#code-panel")
    expect(panel.locator("#code-digest")).to_have_text(digest)
    expect(panel.locator("#code-size")).to_contain_text("3 files")
    expect(panel.locator("#code-facts")).to_contain_text("numpy==2.1.0")
    expect(panel.locator("#code-facts")).to_contain_text("make data")
    panel.get_by_role("button", name="train.py").click()
    expect(panel.locator(".code-text")).to_contain_text("training from the snapshot")
    panel.get_by_role("button", name="weights.bin").click()
    expect(panel.locator("#code-file")).to_contain_text("binary: not shown")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the job page overflows a phone's width by {overflow}px"
    screenshot(page, "job-code-390")

    outsider = Member(server, "nlp", "viewer")
    with outsider.client() as client:
        for path in ("workdir", "workdir/file?path=train.py"):
            answer = client.get(f"/api/queue/{job['id']}/{path}")
            assert answer.status_code == 403, answer.text
            assert "training from the snapshot" not in answer.text


def test_the_train_page_submits_a_stored_snapshot_after_checking_it(
    server: ServerProcess, page: Page, tmp_path: Path
) -> None:
    digest = stored_snapshot(server, tmp_path)
    sign_in(page, server.admin_key, then="/train")
    train_ready(page)
    page.fill("#config-json", json.dumps({"command": ["python", "train.py"]}))
    page.fill("#labels", "gpu=none")
    unknown = "sha256:" + "0" * 64
    page.fill("#workdir", unknown)
    expect(page.locator("#workdir-error")).to_contain_text("gpufleet run")  # checked at once
    page.click("#submit")
    expect(page.locator("#workdir-error")).to_contain_text("no snapshot")  # and at submit
    assert "/train" in page.url  # nothing was submitted
    page.fill("#workdir", digest)
    expect(page.locator("#workdir-status")).to_contain_text("Stored: ")
    page.set_viewport_size(PHONE)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the Train page overflows a phone's width by {overflow}px"
    page.click("#submit")
    page.wait_for_url("**/queue/j_*")
    job_id = page.url.rsplit("/", 1)[-1]
    assert job_state(server, job_id)["config"]["workdir"] == digest
    expect(page.locator("#code-digest")).to_have_text(digest)
