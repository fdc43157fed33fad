"""Schemathesis against the running server's OpenAPI document, every route, authenticated."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import FakeWorker, ServerProcess, unique

ST = str(Path(sys.executable).with_name("st"))
ROOT = Path(__file__).resolve().parents[2]
HOOKS = "tests.e2e.schemathesis_hooks"  # the nasty values of tests/nasty.py in every body


# The budget: about half a minute of one test process, on SQLite: the documented examples,
# fuzzing with the nasty values of tests/nasty.py (`--max-examples` each operation), and the
# stateful links. The coverage phase (each operation with the values at and past its schema's
# bounds: 3,000 requests, 40 s more) runs with GPUFLEET_SCHEMATHESIS_PHASES=all; what one
# database stores and the other refuses is sent to both by tests/api/test_input_property.py
# and test_hostile_input.py, which run on SQLite and PostgreSQL.
EVERY_PHASE = "examples,coverage,fuzzing,stateful"
PHASES = (
    EVERY_PHASE
    if os.environ.get("GPUFLEET_SCHEMATHESIS_PHASES") == "all"
    else "examples,fuzzing,stateful"
)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_no_route_answers_5xx_or_off_its_schema(tmp_path: Path, database_url: str | None) -> None:
    server = ServerProcess(tmp_path / "server", database_url, **{"auth-failure-limit": 0})
    server.start()
    try:
        worker = FakeWorker(server, unique("w"))
        worker.register()
        run = subprocess.run(
            [
                ST,
                "run",
                f"{server.url}/openapi.json",
                "-H",
                f"Authorization: Bearer {server.admin_key}",
                "-H",
                f"X-Worker-Token: {worker.token}",
                "--exclude-path",
                "/api/workers/stream",  # endless SSE streams
                "--exclude-path",
                "/api/events",
                "--checks",
                "not_a_server_error,response_schema_conformance,"
                "content_type_conformance,status_code_conformance",
                "--max-examples",
                "10",  # over ~120 operations: 1,000+ requests, the slowest file of the suite
                "--request-timeout",
                "10",
                "--seed",
                "1",
                "--phases",
                PHASES,
            ],
            capture_output=True,
            text=True,
            timeout=400,
            cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": HOOKS, "PYTHONPATH": str(ROOT)},
        )
    finally:
        server.kill(signal.SIGTERM)
    summary = run.stdout[-3000:]
    assert run.returncode == 0, summary
    generated = re.search(r"(\d+) generated", run.stdout)
    assert generated and int(generated.group(1)) > 500, summary
    assert " 500 Internal Server Error" not in server.log_path.read_text()
