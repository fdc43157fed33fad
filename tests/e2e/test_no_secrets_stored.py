"""After a full run, the database holds no raw token or key, and the log leaks none."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.e2e.conftest import ServerProcess, WorkerProcess, unique
from tests.waiting import wait_until


def test_no_raw_secret_reaches_the_database_or_the_log(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    secrets: list[str] = [server.admin_key]
    worker: WorkerProcess | None = None
    try:
        tag = {"pool": unique("p")}
        (tmp_path / "workers").mkdir()
        worker = WorkerProcess(server, tmp_path / "workers", labels=tag)
        secrets.append(worker.token)
        worker.start()
        with server.admin() as admin:
            job = admin.post(
                "/api/queue/submit",
                json={
                    "config": {
                        "command": ["python", "-c", "print('done')"],
                        "env": {"NOT_A_SECRET": "x"},
                    },
                    "worker_labels": tag,
                },
            ).json()
            wait_until(
                lambda: admin.get(f"/api/queue/{job['id']}").json()["status"] == "completed",
                timeout=15,
                message="the job",
            )
            other = admin.post("/api/admin/workers", json={"name": unique("w")}).json()
            secrets.append(other["token"])
            secrets.append(
                admin.post(f"/api/admin/workers/{other['worker_id']}/token").json()["token"]
            )
            minted = admin.post(
                "/api/admin/api-keys", json={"name": "ci", "permissions": ["queue.read"]}
            ).json()
            secrets.append(minted["key"])
        guesses = [f"wt_{unique('guess')}", f"gfk_{unique('guess')}"]
        with httpx.Client(base_url=server.url, timeout=5) as anon:
            anon.post("/api/workers/register", json={}, headers={"X-Worker-Token": guesses[0]})
            anon.get("/api/queue", headers={"Authorization": f"Bearer {guesses[1]}"})
        secrets += guesses
    finally:
        if worker is not None:
            worker.stop()
        server.kill(signal.SIGTERM)
    stored = b"".join(p.read_bytes() for p in server.data_dir.glob("gpufleet.db*"))
    assert len(stored) > 10_000  # the database really is there, with the run in it
    leaked = [s[:8] + "…" for s in secrets if s.encode() in stored]
    assert leaked == []
    log = server.log_path.read_text()
    # The admin key is shown once on the console at first start, by design; nothing else.
    assert [s[:8] + "…" for s in secrets[1:] if s in log] == []
