"""Secrets for jobs end to end (#31): set with `gpufleet secrets` (stdin, --from-env), referenced
from a job's env, put into the job's process by a real `gpufleet worker`, and found nowhere
else: not in the server's log, its SQLite database and WAL, the worker's log or work folder."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import Member, ServerProcess, WorkerProcess, unique, wait_job

HF = "hf_e2e_" + unique("v") + "_0123456789abcdef"
WANDB = "wandb_e2e_" + unique("v") + "_fedcba9876543210"
PRINT_DIGESTS = (
    "import hashlib, os\n"
    "for name in ('HF_TOKEN', 'WANDB_API_KEY'):\n"
    "    print(name, hashlib.sha256(os.environ[name].encode()).hexdigest())\n"
)


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_a_secret_reaches_the_jobs_process_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    worker: WorkerProcess | None = None
    late: WorkerProcess | None = None
    (tmp_path / "workers").mkdir()
    try:
        alice = Member(server, "nlp", "researcher")
        with server.admin() as admin:
            lead = admin.post(
                "/api/users", json={"name": unique("lena"), "level": "lead", "team": alice.team}
            ).json()
            lead_key = admin.post(
                "/api/admin/api-keys",
                json={"name": "lena", "permissions": ["queue.submit"], "user": lead["name"]},
            ).json()["key"]

        # The value never on a command line: stdin, or an environment variable.
        said = ok(gf(server, "secrets", "set", "hf", key=alice.key, input=HF + "\n"))
        assert "Secret hf set for" in said and HF not in said
        refused = gf(
            server, "secrets", "set", "wandb", "--team", alice.team, key=alice.key, input="x"
        )
        assert alice.team in one_line_error(refused) and "leads" in one_line_error(refused)
        argv = gf(server, "secrets", "set", "wandb", WANDB, key=alice.key)
        assert argv.returncode != 0
        monkeypatch.setenv("E2E_WANDB", WANDB)
        team_args = ("--team", alice.team, "--from-env", "E2E_WANDB")
        ok(gf(server, "secrets", "set", "wandb", *team_args, key=lead_key))
        listed = as_json(gf(server, "secrets", "list", "--json", key=alice.key))["secrets"]
        assert {(s["scope"], s["name"]) for s in listed} == {("user", "hf"), ("team", "wandb")}
        table = ok(gf(server, "secrets", "list", key=alice.key))
        assert "hf" in table and "wandb" in table and HF not in table and WANDB not in table

        tag = {"pool": unique("p")}
        worker = WorkerProcess(server, tmp_path / "workers", labels=tag)
        worker.start()
        env = {"HF_TOKEN": {"secret": "hf"}, "WANDB_API_KEY": {"secret": "wandb"}}
        job = alice.submit(tag, ["python", "-c", PRINT_DIGESTS], config={"env": env}, gpu_count=0)
        done = wait_job(server, job["id"], "completed", "failed")
        assert done["status"] == "completed", done
        assert done["config"]["env"] == env  # the reference is what the job row holds
        with server.admin() as admin:
            lines = [
                line["text"] for line in admin.get(f"/api/queue/{job['id']}/logs").json()["lines"]
            ]
        assert f"HF_TOKEN {sha(HF)}" in lines and f"WANDB_API_KEY {sha(WANDB)}" in lines

        # Deleted after the submit, before a worker takes it: that attempt fails, saying why.
        other = {"pool": unique("q")}
        waiting = alice.submit(
            other, ["python", "-c", PRINT_DIGESTS], config={"env": env}, gpu_count=0, max_retries=0
        )
        ok(gf(server, "secrets", "delete", "hf", key=alice.key))
        # Persistent: an ephemeral one could take the job, fail it and exit before start()
        # sees it connected.
        late = WorkerProcess(server, tmp_path / "workers", labels=other, persistent=True)
        late.start()
        failed = wait_job(server, waiting["id"], "failed")
        assert "secret 'hf'" in (failed["error"] or ""), failed
    finally:
        for w in (worker, late):
            if w is not None:
                w.stop()
        server.kill(signal.SIGTERM)
    stored = b"".join(p.read_bytes() for p in server.data_dir.glob("gpufleet.db*"))
    assert len(stored) > 10_000  # the database really is there, with the run in it
    server_log = server.log_path.read_bytes()
    assert len(server_log) > 0
    worker_files = b"".join(
        p.read_bytes() for p in (tmp_path / "workers").rglob("*") if p.is_file()
    )
    for value in (HF, WANDB):
        assert value.encode() not in stored
        assert value.encode() not in server_log
        assert value.encode() not in worker_files
