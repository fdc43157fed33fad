"""The job page on long logs (#15.2): it appended and scrolled once a line, and froze on
20,000. Now it opens on the log's end, follows the live tail, holds a bounded window of
lines, reads earlier ones on demand, heads each attempt's lines, and downloads the whole log.

The figures it measures are printed (run with -s) and recorded in docs/benchmarks.md."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, screenshot, sign_in
from tests.e2e.conftest import FakeWorker, ServerProcess, submit_job, unique
from tests.logfill import RunningJob, line_text, running_job

# Ten windows of lines by default (make test's budget: the behaviour, not the figures);
# GPUFLEET_TEST_LOG_LINES=200000 is the size docs/benchmarks.md's figures were read at.
LINES = int(os.environ.get("GPUFLEET_TEST_LOG_LINES", "20000"))
LIVE = LINES // 10  # shipped while the page follows
DESKTOP = {"width": 1440, "height": 900}
WINDOW = 2000  # logview.js: the most line elements the page keeps


@pytest.fixture(scope="module")
def big_job(server: ServerProcess) -> Iterator[RunningJob]:
    job = running_job(server, "big")
    started = time.monotonic()
    job.ship(LINES)
    print(f"\n{LINES} lines shipped in {time.monotonic() - started:.1f} s")
    yield job
    job.worker.close()


def _lines(page: Page) -> int:
    return int(page.locator("#logs .log-line").count())


def _first(page: Page) -> str:
    return str(page.locator("#logs .log-line").first.text_content()).rstrip("\n")


def test_a_long_log_opens_at_its_end_follows_and_reads_back_on_demand(
    server: ServerProcess, page: Page, big_job: RunningJob, tmp_path: Path
) -> None:
    page.set_viewport_size(DESKTOP)
    sign_in(page, server.admin_key, then="/queue")
    started = time.monotonic()
    page.goto(f"/queue/{big_job.job_id}")
    expect(page.locator("#logs .log-line").last).to_have_text(line_text(LINES - 1), timeout=15_000)
    first_paint = time.monotonic() - started
    expect(page.locator("#log-state")).to_have_text("following")
    following = time.monotonic() - started
    print(f"\nfirst paint {first_paint:.2f} s, following {following:.2f} s")
    assert _lines(page) <= WINDOW
    expect(page.locator(".log-attempt")).to_have_count(1)
    expect(page.locator("#log-earlier")).to_be_visible()

    # The live tail, drawn as it comes while the page answers clicks; the DOM stays bounded.
    shipping = threading.Thread(target=big_job.ship, args=(LIVE,))
    shipping.start()
    clicked = time.monotonic()
    page.click("#cancel")
    expect(page.locator("#confirm")).to_be_visible()
    page.click("#confirm [data-close]")
    expect(page.locator("#confirm")).to_be_hidden()
    answered = time.monotonic() - clicked
    shipping.join()
    total = LINES + LIVE
    expect(page.locator("#logs .log-line").last).to_have_text(line_text(total - 1))
    print(f"a dialog opened and closed in {answered:.2f} s while {LIVE} lines streamed in")
    assert _lines(page) <= WINDOW
    expect(page.locator("#log-state")).to_have_text("following")
    heap = page.evaluate("performance.memory.usedJSHeapSize") / 2**20
    print(f"JS heap {heap:.0f} MiB, {_lines(page)} line elements")

    page.locator("#logs").evaluate("box => { box.scrollTop = 0; }")  # the reader scrolls up
    expect(page.locator("#log-state")).to_have_text("paused")
    expect(page.locator("#log-resume")).to_be_visible()
    earlier_top = total - WINDOW - 500  # the window's top, then a page before it
    expect(page.locator("#logs .log-line").first).to_have_text(line_text(earlier_top))
    page.click("#log-earlier")
    expect(page.locator("#logs .log-line").first).to_have_text(line_text(earlier_top - 500))
    assert _lines(page) <= WINDOW

    big_job.ship(5000)  # while paused: counted, not drawn
    expect(page.locator("#log-state")).to_have_text("paused: 5000 new lines")
    assert _lines(page) <= WINDOW
    assert _first(page) == line_text(earlier_top - 500)  # one page a click, no more
    clicked = time.monotonic()
    page.click("#log-resume")
    expect(page.locator("#log-state")).to_have_text("following")
    expect(page.locator("#logs .log-line").last).to_have_text(line_text(total + 4999))
    resumed = time.monotonic() - clicked
    print(f"resume following answered in {resumed:.2f} s")
    assert _lines(page) <= WINDOW

    with page.expect_download() as download:
        page.click("#log-download")
    assert download.value.suggested_filename == f"{big_job.job_id}.log"
    saved = tmp_path / "job.log"
    download.value.save_as(saved)
    with saved.open() as text:
        head = text.readline()
        count = sum(1 for _ in text)
    assert head.startswith("==> attempt 1 (")
    assert count == total + 5000
    assert saved.read_text().splitlines()[-1] == line_text(total + 4999)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the job page is {overflow} px wider than the window"
    screenshot(page, "job-logs")


def test_each_attempts_lines_sit_under_its_own_header(server: ServerProcess, page: Page) -> None:
    tag = {"pool": unique("retry")}
    name = unique("retry")
    worker = FakeWorker(server, name, labels=tag)
    worker.register(labels=tag)
    stream = worker.connect()
    job_id = submit_job(server, tag, ["true"], max_retries=1, retry_on=["failed"])
    for number, status in ((1, "failed"), (2, "completed")):
        attempt = stream.next("job_submit")["attempt_id"]
        for step in ("acknowledged", "running"):
            assert worker.report(job_id, step, attempt_id=attempt).status_code == 200
        lines = [{"text": f"attempt {number} line {i}"} for i in range(3)]
        with worker.http() as c:
            resp = c.post(
                f"/api/workers/job/{job_id}/logs", json={"attempt_id": attempt, "lines": lines}
            )
            assert resp.status_code == 200, resp.text
        resp = worker.report(job_id, status, attempt_id=attempt, exit_code=2 - number)
        assert resp.status_code == 200, resp.text
    worker.close()

    page.set_viewport_size(PHONE)
    sign_in(page, server.admin_key, then=f"/queue/{job_id}")
    expect(page.locator("#log-state")).to_have_text("ended: completed")
    headers = page.locator("#logs .log-attempt")
    expect(headers).to_have_count(2)
    # The worker by name (defect 6), its id on hover.
    expect(headers.nth(0)).to_contain_text(f"Attempt 1 on {name}, started ")
    expect(headers.nth(1)).to_contain_text(f"Attempt 2 on {name}, started ")
    expect(headers.nth(0).locator("span[title]")).to_have_attribute("title", worker.id)
    texts = page.locator("#logs > span").all_text_contents()
    assert [t.rstrip("\n") for t in texts[5:]] == [f"attempt 2 line {i}" for i in range(3)]
    assert texts[4].startswith("Attempt 2 on ")
    expect(page.locator("#log-earlier")).to_be_hidden()
    expect(page.locator("#log-resume")).to_be_hidden()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the job page is {overflow} px wider than a phone screen"
    screenshot(page, "phone-job-logs")


def test_a_log_of_wide_lines_read_in_pages_of_4_mib_shows_every_line(
    server: ServerProcess, page: Page
) -> None:
    wide = running_job(server, "wide")
    texts = [f"{i:04d} " + "w" * (64 * 1024 - 5) for i in range(150)]  # 9.4 MiB, 3 pages
    with wide.worker.http() as c:
        for start in range(0, len(texts), 15):  # under 1 MiB a batch
            lines = [{"stream": "stdout", "text": t} for t in texts[start : start + 15]]
            resp = c.post(
                f"/api/workers/job/{wide.job_id}/logs",
                json={"attempt_id": wide.attempt_id, "lines": lines},
            )
            assert resp.status_code == 200, resp.text
    wide.finish()
    wide.worker.close()

    page.set_viewport_size(DESKTOP)
    sign_in(page, server.admin_key, then=f"/queue/{wide.job_id}")

    expect(page.locator("#log-state")).to_have_text("ended: completed", timeout=15_000)
    expect(page.locator("#logs .log-line")).to_have_count(len(texts))
    shown = page.evaluate(
        "[...document.querySelectorAll('#logs .log-line')].map((e) => e.textContent.slice(0, 4))"
    )
    assert shown == [f"{i:04d}" for i in range(len(texts))]


HOSTILE = "\x1b[1;31mred error\x1b[0m <img src=x onerror=alert(1)> <b>bold?</b> \x1b[?25l"
NEEDLE = "needle (a.b) [x]+ 50%_ here"


@pytest.fixture(scope="module")
def searched_job(server: ServerProcess) -> Iterator[tuple[str, dict[int, int]]]:
    """A 3,000-line log: line 10 coloured and holding markup, lines 20 and 2,500 a needle.
    Yields the job and each line's seq by its number."""
    job = running_job(server, "search")
    special = {10: HOSTILE, 20: NEEDLE, 2500: "NEEDLE (A.B) [X]+ 50%_ HERE again"}
    with job.worker.http() as c:
        for start in range(0, 3000, 1000):
            lines = [{"text": special.get(i, f"plain {i}")} for i in range(start, start + 1000)]
            resp = c.post(
                f"/api/workers/job/{job.job_id}/logs",
                json={"attempt_id": job.attempt_id, "lines": lines},
            )
            assert resp.status_code == 200, resp.text
    with server.admin() as admin:
        body = admin.get(f"/api/queue/{job.job_id}/logs", params={"limit": 5000}).json()
    seqs = {i: line["seq"] for i, line in enumerate(body["lines"])}
    yield job.job_id, seqs
    job.worker.close()


def _in_view(page: Page, selector: str) -> bool:
    box = "document.querySelector('#logs').getBoundingClientRect()"
    return bool(
        page.evaluate(
            f"""(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();
            const b = {box}; return r.top >= b.top && r.bottom <= b.bottom + 1; }})()"""
        )
    )


def test_a_link_to_a_line_times_colours_and_search_within_and_across_the_log(
    server: ServerProcess, page: Page, searched_job: tuple[str, dict[int, int]]
) -> None:
    """At a phone's width, where a line has least room to be brought into view; the page is
    then measured at 1440 px too (the flow once, not once a width)."""
    job_id, seqs = searched_job
    with server.admin() as admin:
        found = admin.get(f"/api/queue/{job_id}/logs", params={"q": "NEEDLE (a.b)"}).json()
        line10 = admin.get(f"/api/queue/{job_id}/logs", params={"after": seqs[10] - 1, "limit": 1})
    assert [line["seq"] for line in found["lines"]] == [seqs[20], seqs[2500]]
    page.set_viewport_size(PHONE)

    # A link to line 10, far above the tail the page opens on: read, marked, in view.
    sign_in(page, server.admin_key, then=f"/queue/{job_id}#L{seqs[10]}")
    target = page.locator(f"#L{seqs[10]}")
    expect(target).to_have_class(re.compile(r"\blog-target\b"))
    assert _in_view(page, f"#L{seqs[10]}")
    expect(page.locator("#log-state")).to_have_text(re.compile("^paused"))
    # Its colours drawn, its markup shown as text (no element made of it).
    expect(target.locator("span.ansi-fg-1.ansi-bold")).to_have_text("red error")
    expect(target).to_have_text("red error <img src=x onerror=alert(1)> <b>bold?</b> \n")
    expect(page.locator("#logs img, #logs b")).to_have_count(0)

    # Times on demand, drawn beside the text, never in it; the choice is kept.
    before = "(el) => getComputedStyle(el, '::before').content"
    assert target.evaluate(before) == "none"
    page.check("#log-times")
    stamp = target.evaluate(before)
    assert line10.json()["lines"][0]["ts"][:4] in stamp, stamp
    page.reload()
    expect(page.locator("#log-times")).to_be_checked()
    expect(page.locator(f"#L{seqs[10]}")).to_have_class(re.compile(r"\blog-target\b"))

    # Find in the lines shown (those around line 10): only line 20, with its signs as typed.
    page.fill("#log-q", "(A.B) [x]+ 50%_")
    page.click("#log-next")
    expect(page.locator("#log-hits")).to_have_text("1 of 1 in the lines shown")
    expect(page.locator(f"#L{seqs[20]}")).to_have_class(re.compile(r"\blog-target\b"))
    page.fill("#log-q", "(a.b] no such")
    page.press("#log-q", "Enter")
    expect(page.locator("#log-hits")).to_contain_text("no match in the lines shown")

    # Search whole log: both needles, each a link that brings its line.
    page.fill("#log-q", "needle (a.b)")
    page.click("#log-search-all")
    results = page.locator("#log-results a")
    expect(results).to_have_count(2)
    expect(page.locator("#log-results-title")).to_contain_text("2 lines hold")
    assert [results.nth(i).get_attribute("href") for i in range(2)] == [
        f"#L{seqs[20]}",
        f"#L{seqs[2500]}",
    ]
    results.nth(1).click()
    far = page.locator(f"#L{seqs[2500]}")
    expect(far).to_have_class(re.compile(r"\blog-target\b"))
    assert _in_view(page, f"#L{seqs[2500]}")
    assert page.evaluate("location.hash") == f"#L{seqs[2500]}"

    # A tap on a line makes the page's address that line's.
    page.locator(f"#L{seqs[2501]}").click(position={"x": 200, "y": 5})
    assert page.evaluate("location.hash") == f"#L{seqs[2501]}"
    expect(page.locator(f"#L{seqs[2501]}")).to_have_class(re.compile(r"\blog-target\b"))

    for viewport in (PHONE, DESKTOP):
        page.set_viewport_size(viewport)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the job page is {overflow} px too wide at {viewport['width']} px"
        screenshot(page, f"job-log-search-{viewport['width']}")
