"""The audit log's filters refuse what can match nothing by construction, take an actor by
name, and say why a filter may find nothing (#15.6, #15.8)."""

from __future__ import annotations

from gpufleet.server.context import transaction
from tests.api.conftest import Fleet


async def test_since_after_until_is_refused_saying_what_to_change(fleet: Fleet) -> None:
    answer = await fleet.admin.get(
        "/api/audit", params={"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    )

    assert answer.status_code == 422, answer.text
    assert "is after until" in answer.json()["detail"]


async def test_an_unknown_event_type_is_refused_naming_the_families(fleet: Fleet) -> None:
    for value in ("wrker.", "worker.exploded"):
        answer = await fleet.admin.get("/api/audit", params={"type": value})
        assert answer.status_code == 422, (value, answer.text)
        assert f"unknown event type {value!r}" in answer.json()["detail"]
        assert "worker." in answer.json()["detail"]
    for known in ("worker.", "worker.created", "apikey."):
        assert (await fleet.admin.get("/api/audit", params={"type": known})).status_code == 200


async def test_a_type_the_log_holds_is_accepted_though_not_catalogued(fleet: Fleet) -> None:
    async with transaction(fleet.ctx) as tx:  # as a module newer than the catalogue would
        tx.audit("webhook.delivered", "system")
    answer = await fleet.admin.get("/api/audit", params={"type": "webhook."})
    assert answer.status_code == 200, answer.text


async def test_the_actor_filter_takes_a_key_name_or_id_and_the_list_names_actors(
    fleet: Fleet,
) -> None:
    created = await fleet.admin.post("/api/admin/workers", json={"name": "gpu-a"})
    assert created.status_code == 201, created.text
    key = (await fleet.audit(type="worker.created"))[0]["actor"]
    assert key.startswith("key:k_")

    by_name = (await fleet.admin.get("/api/audit", params={"actor": "admin"})).json()
    by_id = (await fleet.admin.get("/api/audit", params={"actor": key[4:]})).json()

    assert by_name["total"] > 0 and by_name["events"] == by_id["events"]
    assert all(e["actor"] == key for e in by_name["events"])
    assert by_name["actor_names"] == {key: "admin"}
    assert by_name["hint"] is None


async def test_an_actor_filter_that_matches_no_one_says_so(fleet: Fleet) -> None:
    body = (await fleet.admin.get("/api/audit", params={"actor": "nobody"})).json()

    assert body["total"] == 0
    assert "no key, worker or user named 'nobody'" in body["hint"]


async def test_a_users_name_filters_to_their_keys_events_and_each_event_names_its_user(
    fleet: Fleet,
) -> None:
    """#33.10: `rita` answered "No key or worker named 'rita'"; the log spoke in keys."""
    from tests.api.test_people import key_of, make_user

    await make_user(fleet, "rita")
    for name in ("one", "two"):  # two keys of hers, each submitting a job
        async with await key_of(fleet, "rita", "queue.submit", "queue.read") as rita:
            answer = await rita.post("/api/queue/submit", json={"config": {"command": [name]}})
            assert answer.status_code == 201, answer.text
    await fleet.submit()  # the admin's

    by_actor = (await fleet.admin.get("/api/audit", params={"actor": "rita"})).json()
    by_user = (await fleet.admin.get("/api/audit", params={"user": "rita"})).json()
    everyone = (await fleet.admin.get("/api/audit", params={"type": "job.submitted"})).json()
    nobody = (await fleet.admin.get("/api/audit", params={"user": "nobody"})).json()

    assert by_actor["hint"] is None
    assert by_user["events"] == by_actor["events"]
    assert [e["event_type"] for e in by_user["events"]].count("job.submitted") == 2
    assert len({e["actor"] for e in by_user["events"]}) == 2  # her two keys
    assert set(by_user["actor_users"].values()) == {"rita"}
    users = {everyone["actor_users"].get(e["actor"]) for e in everyone["events"]}
    assert {"rita", "admin"} <= users
    assert nobody["total"] == 0
    assert "no user named 'nobody'" in nobody["hint"]
