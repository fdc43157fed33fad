"""A SimpleTuner trainer's 96 MiB file through a real `gpufleet server`'s storage route and
back out through the user API: both ways streamed, the server's memory not growing by it."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import httpx
import psutil

from tests.e2e.conftest import FakeWorker, ServerProcess, unique
from tests.e2e.test_artifact_streaming import SIZE, _chunks, _sha

MiB = 1024 * 1024


def test_a_trainers_large_put_and_its_download_stream_in_bounded_memory(
    tmp_path: Path,
) -> None:
    # The bytes never touch the database: SQLite alone (the records are tested on both).
    server = ServerProcess(tmp_path / "server", None)
    server.start()
    try:
        assert server.proc is not None
        rss = psutil.Process(server.proc.pid).memory_info
        lane = {"lane": unique("st")}
        worker = FakeWorker(server, unique("w"), labels=lane)
        worker.register(features=None, gpu_info={"name": "GPU", "vram_gb": 24, "count": 1})
        worker.keep_alive()
        stream = worker.connect()
        with server.admin() as admin:
            submitted = admin.post(
                "/api/queue/submit",
                json={
                    "config": {"model_type": "lora", "output_dir": "output/models"},
                    "target": "worker",
                    "worker_labels": lane,
                },
            )
        assert submitted.status_code == 201, submitted.text
        offer = stream.next("job_submit")
        job_id, token = offer["job_id"], offer["upload_token"]
        assert worker.report(job_id, "training").status_code == 200
        seed = os.urandom(8)
        digest = _sha(seed)
        before = rss().rss
        with httpx.Client(base_url=server.url, timeout=60) as c:
            put = c.put(
                f"/api/cloud/storage/gpufleet/{job_id}/models/weights.bin",
                content=_chunks(seed),  # chunked: no length announced, the limit still holds
                headers={"X-SimpleTuner-Secret": token},
            )
            assert put.status_code == 200, put.text
            grown_in = rss().rss - before
            back = hashlib.sha256()
            headers = {"Authorization": f"Bearer {server.admin_key}"}
            url = f"/api/queue/{job_id}/artifacts/output/models/weights.bin"
            with c.stream("GET", url, headers=headers) as answer:
                assert answer.status_code == 200
                assert int(answer.headers["content-length"]) == SIZE
                assert answer.headers["x-gpufleet-sha256"] == digest
                for chunk in answer.iter_bytes():
                    back.update(chunk)
            grown_out = rss().rss - before
        worker.close()
        assert back.hexdigest() == digest
        # Buffered whole, either way would grow the process by the file's 96 MiB.
        assert grown_in < 40 * MiB, f"the upload grew the server by {grown_in / MiB:.0f} MiB"
        assert grown_out < 40 * MiB, f"the download grew the server by {grown_out / MiB:.0f} MiB"
    finally:
        server.kill(signal.SIGTERM)
