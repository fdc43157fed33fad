"""Every curl example of the specification, verbatim, run by curl against a real server.

The examples are copied from the specification into `spec_examples.txt` beside this file (its
header says from which version), so a new or changed example is tested as written once copied.
Only what cannot be verbatim changes: the server's address, an `Authorization` header where an
example has none (the spec leaves it out for brevity), the placeholder worker id, and `| jq`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ServerProcess, serving

EXAMPLES = Path(__file__).resolve().parent / "spec_examples.txt"
SPEC_URL = "http://localhost:8001"
PLACEHOLDER_WORKER = "w_abc123"
# The stored configs the submit examples name.
CONFIGS = ("my-training-config", "my-config")


def _complete(text: str) -> bool:
    """Whether `text` is a whole shell command: its quotes closed, no line continued."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # "No closing quotation"
        return False
    return True


def curl_examples(script: str) -> list[str]:
    """The curl commands of a shell text, each as written (continuations included)."""
    commands = []
    pending = ""
    for line in script.splitlines(keepends=True):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line
        if _complete(pending):
            if pending.lstrip().startswith("curl "):
                commands.append(pending.strip())
            pending = ""
    assert not pending, f"an example is not a whole command: {pending!r}"
    return commands


def runnable(example: str, url: str, worker_id: str) -> str:
    command = re.sub(r"\s*\|\s*jq\b.*$", "", example, flags=re.S)
    command = command.replace(SPEC_URL, url).replace(PLACEHOLDER_WORKER, worker_id)
    if "Authorization:" not in command:
        command += ' -H "Authorization: Bearer $ADMIN_TOKEN"'
    return command + " --max-time 20 -w '\\n%{http_code}'"


@pytest.fixture(scope="module")
def spec_text() -> str:
    return EXAMPLES.read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("spec"), None)


def test_every_curl_line_of_the_examples_is_found(spec_text: str) -> None:
    curl_lines = [ln for ln in spec_text.splitlines() if ln.lstrip().startswith("curl ")]
    examples = curl_examples(spec_text)
    assert len(examples) == len(curl_lines) >= 10
    assert all(e.startswith("curl ") and e.count("curl ") == 1 for e in examples)


def test_every_curl_example_of_the_specification_answers_2xx(
    server: ServerProcess, spec_text: str, tmp_path: Path
) -> None:
    with server.admin() as admin:
        for name in CONFIGS:
            stored = admin.put(f"/api/configs/{name}", json={"command": ["true"]})
            assert stored.status_code == 200, stored.text
        # The stand-in for w_abc123: a worker created, never connected (so it can be deleted).
        created = admin.post("/api/admin/workers", json={"name": "spec-example-worker"})
        assert created.status_code == 201, created.text
    worker_id = created.json()["worker_id"]
    env = {**os.environ, "ADMIN_TOKEN": server.admin_key}
    failures = []
    examples = curl_examples(spec_text)
    for example in examples:
        command = runnable(example, server.url, worker_id)
        run = subprocess.run(
            ["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        body, _, status = run.stdout.rpartition("\n")
        if run.returncode != 0 or not status.startswith("2"):
            failures.append(f"{example}\n  → rc {run.returncode}, HTTP {status}: {body[:300]}")
    assert failures == [], "\n\n".join(failures)
    with server.admin() as admin:
        jobs = admin.get("/api/queue", params={"status": "queued"}).json()["jobs"]
        assert (admin.get(f"/api/admin/workers/{worker_id}")).status_code == 404  # deleted
    submits = [e for e in examples if "/api/queue/submit" in e]
    assert len(jobs) == len(submits)  # every submit queued a job (no worker is connected)
