"""A real `gpufleet server` whose webhooks loop meets a receiver that trickles its answer a
byte every 2 s: another webhook's delivery still arrives at once, the slow send ends at the
deadline, and the server's log names neither webhook's userinfo, path nor query."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import ServerProcess, serving
from tests.waiting import wait_until
from tests.webhook_receiver import Receiver, receiving, trickling

DEADLINE = 4.0  # --webhook-timeout: short, for the test


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Set by environment (GPUFLEET_WEBHOOK_*), as a deployment may.
    env = {
        **os.environ,
        "GPUFLEET_WEBHOOK_TIMEOUT": f"{DEADLINE:g}s",
        "GPUFLEET_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    }
    yield from serving(tmp_path_factory.mktemp("webhook-lanes"), None, env=env)


@pytest.fixture
def fast() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


def test_a_trickling_receiver_holds_back_no_other_webhook_and_is_cut_off_at_the_deadline(
    server: ServerProcess, fast: Receiver
) -> None:
    port = fast.url.split(":")[2].split("/")[0]
    secret_url = f"http://hookuser:hookpass@127.0.0.1:{port}/hook/T0PSECRETPATH?token=tok3n"
    with trickling(every=2.0, longest=40.0) as slow, server.admin() as admin:
        slow_url = slow.url + "/S1OWPATH?token=s1owtok3n"
        hooks = {}
        for name, url in (("slow", slow_url), ("fast", secret_url)):
            added = admin.post("/api/admin/webhooks", json={"url": url, "events": ["job.ended"]})
            assert added.status_code == 201, added.text
            hooks[name] = added.json()["id"]

        assert admin.post(f"/api/admin/webhooks/{hooks['slow']}/test").status_code == 202
        connected = slow.wait_connected()
        assert admin.post(f"/api/admin/webhooks/{hooks['fast']}/test").status_code == 202
        [request] = fast.wait_for(1, within=DEADLINE - 1)  # while the slow one trickles
        assert not slow.hung_up
        assert request.path == "/hook/T0PSECRETPATH?token=tok3n"

        hung_up = slow.wait_hung_up(within=DEADLINE + 10)
        assert DEADLINE - 1 < hung_up - connected < DEADLINE + 4  # the deadline, not a read

        def slow_tried() -> dict[str, object] | None:
            log = admin.get(f"/api/admin/webhooks/{hooks['slow']}/deliveries").json()
            tried = [d for d in log["deliveries"] if d["attempts"]]
            return tried[0] if tried else None

        logged = wait_until(slow_tried, timeout=15, message="the slow delivery's try recorded")
        assert logged["status"] == "pending"
        assert logged["error"] == f"no answer within {DEADLINE:g} s"
        audit = admin.get("/api/audit", params={"type": "webhook."}).text

    ours = f"to http://127.0.0.1:{port}/…: answered 200"  # our line, redacted
    wait_until(
        lambda: ours in server.log_path.read_text(), timeout=15, message="the fast delivery logged"
    )
    text = server.log_path.read_text()
    for secret in ("hookuser", "hookpass", "T0PSECRETPATH", "tok3n", "S1OWPATH", "s1owtok3n"):
        assert secret not in text and secret not in audit
