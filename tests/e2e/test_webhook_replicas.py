"""Two `gpufleet server` replicas on one PostgreSQL database both run the webhooks loop:
each delivery reaches the receiver once, and a job cancelled on either is reported."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ServerProcess, start_replicas
from tests.webhook_receiver import Receiver, receiving

pytestmark = pytest.mark.postgres
TESTS = 30


@pytest.fixture
def replicas(tmp_path: Path, pg_database: str) -> Iterator[list[ServerProcess]]:
    # the receiver listens on 127.0.0.1, an address webhooks may not reach unless allowed
    started = start_replicas(tmp_path, pg_database, 2, **{"webhook-allow-hosts": "127.0.0.1"})
    yield started
    for replica in started:
        replica.kill(signal.SIGTERM)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


def test_two_replicas_send_each_delivery_exactly_once(
    replicas: list[ServerProcess], receiver: Receiver
) -> None:
    first, second = replicas
    with first.admin() as admin:
        hook = admin.post(
            "/api/admin/webhooks", json={"url": receiver.url, "events": ["job.ended"]}
        )
        assert hook.status_code == 201, hook.text
        hook_id = hook.json()["id"]
        queued = admin.post(
            "/api/queue/submit", json={"config": {"command": ["true"]}, "target": "worker"}
        ).json()["id"]
    with second.admin() as admin:
        for _ in range(TESTS):  # queued through the other replica, in bursts
            assert admin.post(f"/api/admin/webhooks/{hook_id}/test").status_code == 202
        assert admin.post(f"/api/queue/{queued}/cancel").status_code == 200

    received = receiver.wait_for(TESTS + 1, within=30)
    time.sleep(2.5)  # two more sweeps of each loop: a second send would land by now
    counts = Counter(r.headers["x-gpufleet-delivery"] for r in receiver.received)
    assert len(counts) == TESTS + 1 and set(counts.values()) == {1}, counts
    cancelled = [json.loads(r.body) for r in received if r.headers["x-gpufleet-event"] != "test"]
    assert [(c["event"], c["job"]["id"]) for c in cancelled] == [("job.cancelled", queued)]
    with first.admin() as admin:
        log = admin.get(f"/api/admin/webhooks/{hook_id}/deliveries").json()["deliveries"]
    assert len(log) == TESTS + 1 and {d["status"] for d in log} == {"delivered"}
