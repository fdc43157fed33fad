"""`gpufleet jobs logs` reads a long log a page at a time and prints as it reads; `--tail N`
prints the last N lines (#15.2: it printed all 20,001 lines at once, and had no --tail)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.e2e.commands import gf, ok
from tests.e2e.conftest import ServerProcess, serving
from tests.logfill import RunningJob, line_text, running_job

LINES = 2500  # three pages of 1,000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("cli-logs"), None)


@pytest.fixture(scope="module")
def job(server: ServerProcess) -> Iterator[RunningJob]:
    running = running_job(server, "cli")
    running.ship(LINES)
    running.finish()
    yield running
    running.worker.close()


def _log_reads(server: ServerProcess, job_id: str) -> list[str]:
    """The log page requests the server saw for the job (its access log)."""
    return re.findall(rf"GET /api/queue/{job_id}/logs\?[^ ]*", server.log_path.read_text())


def test_jobs_logs_prints_a_long_log_whole_reading_it_a_page_at_a_time(
    server: ServerProcess, job: RunningJob
) -> None:
    before = len(_log_reads(server, job.job_id))

    printed = ok(gf(server, "jobs", "logs", job.job_id)).splitlines()

    assert printed == [line_text(i) for i in range(LINES)]
    reads = _log_reads(server, job.job_id)[before:]
    assert len(reads) == 3 and all("limit=1000" in read for read in reads), reads


@pytest.mark.parametrize("tail", [0, 3, 1500, 10_000])
def test_jobs_logs_tail_prints_the_last_lines_only(
    server: ServerProcess, job: RunningJob, tail: int
) -> None:
    printed = ok(gf(server, "jobs", "logs", job.job_id, "--tail", str(tail))).splitlines()

    assert printed == [line_text(i) for i in range(max(0, LINES - tail), LINES)]


def test_jobs_logs_tail_with_follow_prints_the_last_lines_then_the_end(
    server: ServerProcess, job: RunningJob
) -> None:
    result = gf(server, "jobs", "logs", job.job_id, "-n", "2", "-f", "--json")

    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["text"] for r in records] == [line_text(LINES - 2), line_text(LINES - 1)]
    assert f"Job {job.job_id} completed." in result.stderr


def test_jobs_logs_tail_refuses_a_negative_count(server: ServerProcess, job: RunningJob) -> None:
    result = gf(server, "jobs", "logs", job.job_id, "--tail", "-1")

    assert result.returncode == 2
    assert "--tail" in result.stderr


def test_jobs_logs_prints_every_line_of_a_log_whose_pages_stop_at_4_mib(
    server: ServerProcess,
) -> None:
    wide = running_job(server, "wide")
    texts = [f"{i:04d}" + "w" * (64 * 1024 - 4) for i in range(150)]  # 9.4 MiB
    with wide.worker.http() as c:
        for start in range(0, len(texts), 15):  # 15 lines of 64 KiB: under 1 MiB a batch
            lines = [{"stream": "stdout", "text": t} for t in texts[start : start + 15]]
            resp = c.post(
                f"/api/workers/job/{wide.job_id}/logs",
                json={"attempt_id": wide.attempt_id, "lines": lines},
            )
            assert resp.status_code == 200, resp.text
    wide.finish()

    printed = ok(gf(server, "jobs", "logs", wide.job_id)).splitlines()

    assert printed == texts
    assert len(_log_reads(server, wide.job_id)) == 3  # 64 lines a page, not 1,000
    wide.worker.close()


def test_jobs_logs_grep_prints_the_lines_holding_the_text_as_typed(
    server: ServerProcess, job: RunningJob
) -> None:
    found = ok(gf(server, "jobs", "logs", job.job_id, "--grep", "STEP=1234 ")).splitlines()
    last = ok(gf(server, "jobs", "logs", job.job_id, "--grep", "step=12", "-n", "2"))
    pattern = ok(gf(server, "jobs", "logs", job.job_id, "--grep", "step=1.34"))

    assert found == [line_text(1234)]
    matching = [line_text(i) for i in range(LINES) if "step=12" in line_text(i)]
    assert last.splitlines() == matching[-2:]
    assert pattern == ""  # `.` is a dot, not any character


def test_jobs_logs_grep_refuses_follow_and_a_text_too_long_in_its_own_terms(
    server: ServerProcess, job: RunningJob
) -> None:
    followed = gf(server, "jobs", "logs", job.job_id, "--grep", "x", "-f")
    long = gf(server, "jobs", "logs", job.job_id, "--grep", "x" * 300)

    assert followed.returncode == 2
    assert "--grep searches the lines stored so far, not new ones: drop -f" in followed.stderr
    assert long.returncode == 2
    assert "--grep is 300 characters; search for at most 256" in long.stderr
