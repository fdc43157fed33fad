"""SimpleTuner's uploads across replicas: two `gpufleet server` processes on one PostgreSQL
database and one artifact store (a shared folder, or object storage: moto's S3 server). The
trainer PUTs through one replica; the file lists, downloads and reads back through the other,
and the other replica refuses the same upload token once the attempt is over."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from tests.e2e.conftest import SHARED_FILES, FakeWorker, ServerProcess, unique
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres
MiB = 1024 * 1024
SIMPLETUNER_CONFIG = {"model_type": "lora", "output_dir": "output/models"}


@pytest.fixture(params=["folder", "s3"])
def replicas(
    request: pytest.FixtureRequest, tmp_path: Path, pg_database: str
) -> Iterator[list[ServerProcess]]:
    env = dict(os.environ)
    if request.param == "folder":
        store = str(tmp_path / "shared-artifacts")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = f"replicas-{secrets.token_hex(4)}"
        httpx.put(f"{endpoint}/{bucket}").raise_for_status()
        store = f"s3://{bucket}/fleet"
        env |= {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
        }
    started = [
        # No worker here is meant to be lost: a 3 s heartbeat timeout, on a loaded machine,
        # once ended the attempt mid-upload (its uploads answered 409).
        ServerProcess(
            tmp_path / f"replica-{n}",
            pg_database,
            env=env,
            artifacts=store,
            **{"heartbeat-timeout": 30, "ack-timeout": 30},
        )
        for n in range(2)
    ]
    started[0].start()
    for replica in started[1:]:
        replica.data_dir.mkdir(parents=True)
        for name in SHARED_FILES:
            shutil.copy2(started[0].data_dir / name, replica.data_dir / name)
        replica.start()
    yield started
    for replica in started:
        replica.kill(signal.SIGTERM)


def s3(replica: ServerProcess, token: str) -> Any:
    """A client configured as the trainer's S3 provider, pointed at `replica`."""
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key=token)
    client = session.client("s3", endpoint_url=f"{replica.url}/api/cloud/storage", use_ssl=False)

    def inject(request: Any, **_: Any) -> None:
        request.headers["X-SimpleTuner-Secret"] = token

    client.meta.events.register("before-sign.s3", inject)
    return client


def test_a_file_put_through_one_replica_downloads_through_the_other(
    replicas: list[ServerProcess], tmp_path: Path
) -> None:
    first, second = replicas
    lane = {"lane": unique("st")}
    worker = FakeWorker(first, unique("w"), labels=lane)
    worker.register(features=None, gpu_info={"name": "GPU", "vram_gb": 24, "count": 1})
    worker.keep_alive()
    stream = worker.connect()
    with second.admin() as admin:
        submitted = admin.post(
            "/api/queue/submit",
            json={"config": SIMPLETUNER_CONFIG, "target": "worker", "worker_labels": lane},
        )
    assert submitted.status_code == 201, submitted.text
    offer = stream.next("job_submit")
    job_id, token = offer["job_id"], offer["upload_token"]
    assert offer["config"]["publishing_config"][0]["secret_key"] == token
    for status in ("starting", "training"):
        assert worker.report(job_id, status).status_code == 200
    data = secrets.token_bytes(9 * MiB + 1)
    key = f"{job_id}/models/model.safetensors"
    writer = s3(first, token)
    writer.put_object(Bucket="gpufleet", Key=key, Body=data)
    with second.admin() as admin:
        listed = admin.get(f"/api/queue/{job_id}/artifacts").json()
        [art] = listed["artifacts"]
        assert (art["path"], art["size"]) == ("output/models/model.safetensors", len(data))
        got = admin.get(
            f"/api/queue/{job_id}/artifacts/output/models/model.safetensors",
            follow_redirects=True,
        )
    assert got.status_code == 200 and hashlib.sha256(got.content).digest() == (
        hashlib.sha256(data).digest()
    )
    reader = s3(second, token)
    target = tmp_path / "back.safetensors"
    reader.download_file("gpufleet", key, str(target))  # ranged GETs, on the other replica
    assert target.read_bytes() == data
    assert worker.report(job_id, "completed").status_code == 200
    wait_until(
        lambda: _status(second, job_id) == "completed",
        timeout=15,
        message="the job to be completed",
    )
    with pytest.raises(ClientError) as refused:
        reader.put_object(Bucket="gpufleet", Key=f"{job_id}/models/late.bin", Body=b"late")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    writer.close()
    reader.close()
    worker.close()


def _status(replica: ServerProcess, job_id: str) -> str:
    with replica.admin() as admin:
        return str(admin.get(f"/api/queue/{job_id}").json()["status"])
