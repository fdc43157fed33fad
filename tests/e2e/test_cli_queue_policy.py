"""`gpufleet queue stats|me|position|approve|reject|limits|cleanup` against a real server
(#18): the policy set from the CLI holds a job, the CLI approves it, and every command reads
back what the API says."""

from __future__ import annotations

import re

from tests.e2e.commands import as_json, gf, ok, one_line_error
from tests.e2e.conftest import ServerProcess, unique
from tests.e2e.test_cli import server

__all__ = ["server"]  # the module's orchestrator, shared with test_cli's fixture


def test_limits_set_from_the_cli_hold_a_job_that_the_cli_approves(
    server: ServerProcess,
) -> None:
    set_ = as_json(
        gf(
            server,
            "queue",
            "limits",
            "--set",
            "max_gpus=64",
            "--set",
            "fair_share=on",
            "--set",
            "approve_levels=admin,viewer",
            "--set",
            "team_max_gpus=8",
            "--json",
        )
    )
    shown = ok(gf(server, "queue", "limits"))
    stats_shown = ok(gf(server, "queue", "stats"))
    with server.admin() as admin:
        submitted = admin.post(
            "/api/queue/submit",
            json={"config": {"command": ["true"]}, "worker_labels": {"pool": unique("p")}},
        )
    job_id = submitted.json()["id"]

    held = submitted.json()["status"]
    stats = as_json(gf(server, "queue", "stats", "--json"))
    me = as_json(gf(server, "queue", "me", "--json"))
    approved = ok(gf(server, "queue", "approve", job_id))
    position = ok(gf(server, "queue", "position", job_id))
    job_shown = ok(gf(server, "jobs", "show", job_id))
    ok(
        gf(
            server,
            "queue",
            "limits",
            *("--set", "approve_levels=viewer", "--set", "max_gpus=none"),
            *("--set", "team_max_gpus=none"),
        )
    )

    assert (set_["max_gpus"], set_["fair_share"], set_["approve_levels"]) == (
        64,
        True,
        ["admin", "viewer"],
    )
    assert "fair_share" in shown and "on" in shown
    # stats names each limit by what it counts: the team's GPU limit is not a job limit
    assert re.search(r"GPUs, a team\s+8\b", stats_shown)
    assert re.search(r"running jobs, a team\s+no limit", stats_shown)
    assert re.search(r"approved by\s+admin \(key:k_", job_shown)
    assert re.search(r"user\s+admin\b", job_shown)
    assert held == "pending_approval"
    assert stats["by_status"]["blocked"] >= 1
    assert job_id in [j["id"] for j in me["blocked_jobs"]]
    assert f"Approved job {job_id}: queued" in approved
    assert f"Job {job_id}: position" in position
    assert as_json(gf(server, "queue", "limits", "--json"))["max_gpus"] is None


def test_a_rejected_job_says_why_and_a_bad_setting_is_one_line(server: ServerProcess) -> None:
    ok(gf(server, "queue", "limits", "--set", "approve_levels=admin,viewer"))
    with server.admin() as admin:
        job_id = admin.post("/api/queue/submit", json={"config": {"command": ["true"]}}).json()[
            "id"
        ]
    ok(gf(server, "queue", "limits", "--set", "approve_levels=viewer"))

    rejected = ok(gf(server, "queue", "reject", job_id, "--reason", "not today"))
    again = one_line_error(gf(server, "queue", "approve", job_id))
    shown = ok(gf(server, "jobs", "show", job_id))
    bad = one_line_error(gf(server, "queue", "limits", "--set", "max_gpus=lots"))
    unknown = one_line_error(gf(server, "queue", "limits", "--set", "speed=11"))
    cleaned = as_json(gf(server, "queue", "cleanup", "--days", "30", "--json"))

    assert f"Rejected job {job_id}: rejected by " in rejected and "not today" in rejected
    assert "not waiting for approval" in again
    assert re.search(r"rejected by\s+admin \(key:k_", shown)
    assert "max_gpus takes a number" in bad
    assert "FIELD one of" in unknown
    assert cleaned == {"success": True, "deleted": 0, "days": 30}
