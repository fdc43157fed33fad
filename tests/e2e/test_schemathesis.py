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


# The budget: about 30 s and 15 CPU-s (the server's and schemathesis') on a loaded 2-core
# machine, on SQLite: the documented examples, fuzzing with the nasty values of tests/nasty.py
# (`--max-examples` each operation: nearly all of the run's cost; at 10, 70 s and 46 CPU-s
# of `make test`), and the stateful links. GPUFLEET_SCHEMATHESIS_PHASES=all adds the coverage
# phase (each operation with the values at and past its schema's bounds: 3,000 requests, 40 s
# more) and fuzzes 10 examples each; what one database stores and the other refuses is sent
# to both by tests/api/test_input_property.py and test_hostile_input.py, which run on SQLite
# and PostgreSQL.
EVERY_PHASE = os.environ.get("GPUFLEET_SCHEMATHESIS_PHASES") == "all"
PHASES = "examples,coverage,fuzzing,stateful" if EVERY_PHASE else "examples,fuzzing,stateful"
# Over ~120 operations: 550 fuzzed requests at 5, 650 in all with the other phases.
MAX_EXAMPLES = "10" if EVERY_PHASE else "5"


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
                MAX_EXAMPLES,
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
