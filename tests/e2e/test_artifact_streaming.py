"""A real `gpufleet server` process takes a file far over the JSON body limit through the
worker API and hands it back, streaming both ways: its memory does not grow by the file."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from tests.e2e.conftest import FakeWorker, ServerProcess, unique
from tests.waiting import wait_until

MiB = 1024 * 1024
SIZE = 96 * MiB
CHUNK = MiB


def _chunks(seed: bytes) -> Iterator[bytes]:
    """The same pseudo-random bytes each time, made as they are sent (never held whole)."""
    block = hashlib.sha256(seed).digest() * (CHUNK // 32)
    for n in range(SIZE // CHUNK):
        yield n.to_bytes(8, "big") + block[8:]


def _sha(seed: bytes) -> str:
    digest = hashlib.sha256()
    for chunk in _chunks(seed):
        digest.update(chunk)
    return digest.hexdigest()


def test_a_file_past_the_body_limit_streams_in_and_out_in_bounded_memory(
    tmp_path: Path,
) -> None:
    # The bytes never touch the database: SQLite alone (the records are tested on both).
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    try:
        assert server.proc is not None
        rss = psutil.Process(server.proc.pid).memory_info
        tag = {"pool": unique("p")}
        worker = FakeWorker(server, unique("w"), labels=tag)
        worker.register()
        worker.keep_alive()
        stream = worker.connect()
        with server.admin() as admin:
            submitted = admin.post(
                "/api/queue/submit",
                json={"config": {"command": ["true"]}, "target": "worker", "worker_labels": tag},
            )
        assert submitted.status_code == 201, submitted.text
        offer = stream.next("job_submit")
        job_id, attempt_id = offer["job_id"], offer["attempt_id"]
        assert worker.report(job_id, "running", attempt_id=attempt_id).status_code == 200
        abandon_an_upload(server, worker.token, job_id, attempt_id)
        seed = os.urandom(8)
        digest = _sha(seed)
        before = rss().rss

        with worker.http() as c:
            c.timeout = httpx.Timeout(60)
            plan = c.post(
                f"/api/workers/job/{job_id}/upload",
                json={
                    "attempt_id": attempt_id,
                    "path": "output/checkpoint-1/weights.bin",
                    "size": SIZE,
                    "sha256": digest,
                    "kind": "checkpoint",
                    "checkpoint": "checkpoint-1",
                },
            ).json()
            assert plan["via"] == "orchestrator", plan
            sent = c.put(plan["url"], content=_chunks(seed), headers=plan["headers"])
            assert sent.status_code == 201, sent.text
            grown_in = rss().rss - before
            committed = c.post(
                f"/api/workers/job/{job_id}/checkpoints",
                json={
                    "attempt_id": attempt_id,
                    "name": "checkpoint-1",
                    "path": "output/checkpoint-1",
                    "step": 1,
                    "files": [
                        {"path": "output/checkpoint-1/weights.bin", "size": SIZE, "sha256": digest}
                    ],
                },
            )
            assert committed.status_code == 201, committed.text
            fetched = c.get(
                f"/api/workers/job/{job_id}/checkpoints/{committed.json()['id']}",
                params={"attempt_id": attempt_id},
            ).json()
            (file,) = fetched["files"]
            back = hashlib.sha256()
            with c.stream("GET", file["url"]) as answer:
                assert answer.status_code == 200
                assert int(answer.headers["content-length"]) == SIZE
                for chunk in answer.iter_bytes():
                    back.update(chunk)
            grown_out = rss().rss - before
        worker.close()

        assert back.hexdigest() == digest == file["sha256"]
        # Buffered whole, either way would grow the process by the file's 96 MiB.
        assert grown_in < 40 * MiB, f"the upload grew the server by {grown_in / MiB:.0f} MiB"
        assert grown_out < 40 * MiB, f"the download grew the server by {grown_out / MiB:.0f} MiB"
        stored = server.data_dir / "artifacts" / "jobs" / job_id / attempt_id / "output"
        assert (stored / "checkpoint-1" / "weights.bin").stat().st_size == SIZE
    finally:
        server.kill(signal.SIGTERM)


def abandon_an_upload(server: ServerProcess, token: str, job_id: str, attempt_id: str) -> None:
    """A worker that dies mid-PUT (its spot machine gone): the orchestrator logs one line, no
    traceback, and stores nothing."""
    body = b"x" * 1000
    with httpx.Client(base_url=server.url, headers={"X-Worker-Token": token}) as c:
        plan = c.post(
            f"/api/workers/job/{job_id}/upload",
            json={
                "attempt_id": attempt_id,
                "path": "output/cut.bin",
                "size": 1000,
                "sha256": _sha_of(body),
            },
        ).json()
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        raw.sendall(
            f"PUT {plan['url']} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Worker-Token: {token}\r\n"
            "Content-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n".encode()
            + body[:10]
        )
        time.sleep(0.2)  # the server is reading the body when the connection goes
    wait_until(
        lambda: "went away before" in server.log_path.read_text(),
        timeout=10,
        message="the orchestrator to note the abandoned upload",
    )
    log = server.log_path.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
    with server.admin() as admin:
        listed = admin.get(f"/api/queue/{job_id}/artifacts").json()["artifacts"]
    assert [a["path"] for a in listed if a["path"] == "output/cut.bin"] == []


def _sha_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
