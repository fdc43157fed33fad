"""`gpufleet keys` and `gpufleet webhooks` as a subprocess against a real orchestrator."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.domain.webhook_targets import redact_url
from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import ServerProcess, serving
from tests.webhook_receiver import receiving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # tests/webhook_receiver.py listens on 127.0.0.1, an address webhooks may not reach else
    yield from serving(
        tmp_path_factory.mktemp("cli-admin"), None, **{"webhook-allow-hosts": "127.0.0.1"}
    )


def test_keys_create_list_use_and_revoke_by_name(server: ServerProcess) -> None:
    created = ok(gf(server, "keys", "create", "ci-bot", "-p", "queue.read"))
    assert "Key (shown only once): gfk_" in created
    key = created.split("Key (shown only once): ")[1].split()[0]
    listed = ok(gf(server, "keys", "list"))
    assert "ci-bot" in listed and "queue.read" in listed and key not in listed

    assert ok(gf(server, "jobs", "list", key=key))  # the key works
    [bot] = [k for k in as_json(gf(server, "keys", "list", "--json")) if k["name"] == "ci-bot"]
    assert bot["last_used_at"] is not None

    assert "Revoked API key ci-bot" in ok(gf(server, "keys", "revoke", "ci-bot", "--yes"))
    assert httpx.get(f"{server.url}/api/queue", headers={"X-API-Key": key}).status_code == 401
    gone = one_line_error(gf(server, "keys", "revoke", "ci-bot", "--yes"))
    assert "gpufleet keys list" in gone


def test_revoking_the_key_in_use_is_refused_in_one_line(server: ServerProcess) -> None:
    error = one_line_error(gf(server, "keys", "revoke", "admin", "--yes"))
    assert "the key you are using now" in error
    assert ok(gf(server, "keys", "list"))


def test_webhooks_add_test_deliveries_update_and_delete(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = one_line_error(gf(server, "webhooks", "add", "ftp://x.example/", "-e", "job.ended"))
    assert "http:// or https://" in refused
    monkeypatch.setenv("HOOK_SECRET", "cli-secret-15ch")
    with receiving() as receiver:
        shown = redact_url(receiver.url)
        short = one_line_error(
            gf(
                server,
                "webhooks",
                "add",
                receiver.url,
                "-e",
                "job.ended",
                "--secret-env",
                "HOOK_SECRET",
            )
        )
        assert "$HOOK_SECRET holds 15 characters" in short and "at least 16" in short
        monkeypatch.setenv("HOOK_SECRET", "cli-secret-of-16-or-more")
        added = as_json(
            gf(
                server,
                "webhooks",
                "add",
                receiver.url,
                "-e",
                "job.ended",
                "--secret-env",
                "HOOK_SECRET",
                "--json",
            )
        )
        assert added["signed"] is True and "secret" not in added
        listing = ok(gf(server, "webhooks", "list"))
        assert shown in listing and "/hook" not in listing

        assert "Delivered" in ok(gf(server, "webhooks", "test", added["id"]))
        [request] = receiver.wait_for(1)
        digest = hmac.new(b"cli-secret-of-16-or-more", request.body, hashlib.sha256).hexdigest()
        assert request.headers["x-gpufleet-signature"] == f"sha256={digest}"
        assert json.loads(request.body)["event"] == "test"
        log = ok(gf(server, "webhooks", "deliveries", added["id"]))
        assert "delivered" in log and "answered 200" in log

        nothing = one_line_error(gf(server, "webhooks", "update", added["id"]))
        assert "nothing to change" in nothing and "--unsigned" in nothing
        both = gf(
            server, "webhooks", "update", added["id"], "--secret-env", "HOOK_SECRET", "--unsigned"
        )
        assert "not both" in one_line_error(both)
        changed = ok(
            gf(server, "webhooks", "update", added["id"], "--unsigned", "-e", "job.failed")
        )
        assert changed.strip() == (
            f"Updated webhook {added['id']} (unsigned, gpufleet) for job.failed, "
            f"sending to {shown}."
        )
        assert "Delivered" in ok(gf(server, "webhooks", "test", added["id"]))
        _, unsigned = receiver.wait_for(2)
        assert "x-gpufleet-signature" not in unsigned.headers
        # A Discord (or Slack) incoming webhook gets its own shape.
        teams = gf(server, "webhooks", "update", added["id"], "--format", "teams")
        assert teams.returncode != 0 and "'teams' is not one of" in teams.stderr
        discord = ok(gf(server, "webhooks", "update", added["id"], "--format", "discord"))
        assert "(unsigned, discord)" in discord
        assert "discord" in ok(gf(server, "webhooks", "list"))
        assert "Delivered" in ok(gf(server, "webhooks", "test", added["id"]))
        *_, shaped = receiver.wait_for(3)
        assert json.loads(shaped.body)["content"].startswith("gpufleet: A test event")
    moved = as_json(
        gf(server, "webhooks", "update", added["id"], "--to", "https://h.example/x", "--json")
    )
    assert (moved["url"], moved["events"], moved["signed"]) == (
        "https://h.example/…",
        ["job.failed"],
        False,
    )

    ok(gf(server, "webhooks", "delete", added["id"], "--yes"))
    assert as_json(gf(server, "webhooks", "list", "--json"))["webhooks"] == []
