"""Open the job page of a running job with N log lines in Debian's Chromium and print the
time to its last line drawn, the slowest script round trip meanwhile, the line elements in
the DOM and the JS heap (docs/benchmarks.md, "The job page on long logs").

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python scripts/measure_job_log_page.py 20000 [CAP_S]

The server runs the code PYTHONPATH names first (a worktree of an older commit measures it).
"""

from __future__ import annotations

import pathlib
import signal
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, LAPTOP, sign_in
from tests.e2e.conftest import ServerProcess
from tests.logfill import line_text, running_job

DRAWN = """() => {
  const lines = document.querySelectorAll('#logs > span');
  return [lines.length, lines.length ? lines[lines.length - 1].textContent : ''];
}"""


def main(count: int, cap: float) -> None:
    server = ServerProcess(pathlib.Path(tempfile.mkdtemp()), None)
    server.start()
    try:
        job = running_job(server)
        job.ship(count)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            context = browser.new_context(viewport=LAPTOP, base_url=server.url)
            context.set_default_timeout(int(cap * 1000))
            page = context.new_page()
            sign_in(page, server.admin_key, then="/queue")
            started = time.monotonic()
            page.goto(f"/queue/{job.job_id}")
            worst, done, drawn = 0.0, None, 0
            while time.monotonic() - started < cap:
                asked = time.monotonic()
                drawn, last = page.evaluate(DRAWN)
                worst = max(worst, time.monotonic() - asked)
                if last.rstrip("\n") == line_text(count - 1):
                    done = time.monotonic() - started
                    break
                time.sleep(0.2)
            heap = page.evaluate("performance.memory.usedJSHeapSize") / 2**20
            drawn_in = f"{done:.2f} s" if done else f"not within {cap:.0f} s"
            print(
                f"lines={count} last_line_drawn={drawn_in} elements={drawn} "
                f"slowest_round_trip={worst:.2f} s js_heap={heap:.0f} MiB"
            )
            browser.close()
    finally:
        server.kill(signal.SIGTERM)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 120.0)
