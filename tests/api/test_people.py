"""Users and teams (#18): who may manage them, what they may be called, what a key of a user
may do, and what deleting one does."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.domain.levels import ADMIN_USER_ID
from gpufleet.errors import Forbidden, InvalidInput
from gpufleet.server.services import auth, people, policy_loop
from tests.api.conftest import Fleet, both_databases, post_raw


async def make_user(fleet: Fleet, name: str, level: str = "researcher", **body: Any) -> Any:
    answer = await fleet.admin.post("/api/users", json={"name": name, "level": level, **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def make_team(fleet: Fleet, name: str, **body: Any) -> Any:
    answer = await fleet.admin.post("/api/teams", json={"name": name, **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def key_of(fleet: Fleet, user: str, *permissions: str) -> httpx.AsyncClient:
    """A client with a new key of `user`."""
    answer = await fleet.admin.post(
        "/api/admin/api-keys",
        json={"name": f"{user}-key", "permissions": list(permissions), "user": user},
    )
    assert answer.status_code == 201, answer.text
    fleet.secrets.add(answer.json()["key"])
    return fleet.client(headers={"Authorization": f"Bearer {answer.json()['key']}"})


# ---- CRUD -------------------------------------------------------------------------------


async def test_users_and_teams_are_created_joined_listed_changed_and_deleted(
    fleet: Fleet,
) -> None:
    nlp = await make_team(fleet, "nlp", weight=2, max_gpus=8)
    alice = await make_user(fleet, "alice", team="nlp", max_queued=20)
    assert alice["teams"] == ["nlp"] and alice["default_team"] == "nlp"
    assert alice["level"] == "researcher" and alice["max_queued"] == 20 and alice["keys"] == 0

    await make_team(fleet, "cv")
    joined = await fleet.admin.put("/api/teams/cv/members/alice")
    assert joined.status_code == 200 and joined.json()["members"] == ["alice"]
    changed = await fleet.admin.patch(
        f"/api/users/{alice['id']}", json={"default_team": "cv", "max_gpus": 4, "level": "lead"}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["default_team"] == "cv" and changed.json()["teams"] == ["cv", "nlp"]
    assert changed.json()["max_gpus"] == 4 and changed.json()["max_queued"] == 20  # kept
    cleared = await fleet.admin.patch("/api/users/alice", json={"max_queued": None})
    assert cleared.json()["max_queued"] is None and cleared.json()["level"] == "lead"

    team = (await fleet.admin.get(f"/api/teams/{nlp['id']}")).json()
    assert team["weight"] == 2 and team["max_gpus"] == 8 and team["members"] == ["alice"]
    assert team["running_jobs"] == 0 and team["running_gpus"] == 0 and team["usage"] == 0
    updated = await fleet.admin.patch(
        "/api/teams/nlp", json={"weight": 0.5, "preemptible": True, "max_jobs": None}
    )
    assert updated.json()["weight"] == 0.5 and updated.json()["preemptible"] is True
    assert updated.json()["max_gpus"] == 8  # not sent: unchanged

    names = {u["name"] for u in (await fleet.admin.get("/api/users")).json()["users"]}
    assert names == {"admin", "alice"}
    assert [t["name"] for t in (await fleet.admin.get("/api/teams")).json()["teams"]] == [
        "cv",
        "nlp",
    ]

    left = await fleet.admin.delete("/api/teams/cv/members/alice")
    assert left.status_code == 200 and left.json()["members"] == []
    after = (await fleet.admin.get("/api/users/alice")).json()
    assert after["default_team"] is None and after["teams"] == ["nlp"]  # no longer a member
    assert (await fleet.admin.delete("/api/teams/cv")).status_code == 200
    assert (await fleet.admin.delete("/api/users/alice")).status_code == 200
    assert (await fleet.admin.get("/api/users/alice")).status_code == 404
    assert (await fleet.admin.get("/api/teams/nlp")).json()["members"] == []

    types = [e["event_type"] for e in await fleet.audit(type="team.")]
    types += [e["event_type"] for e in await fleet.audit(type="user.")]
    assert set(types) == {
        "team.created",
        "team.updated",
        "team.deleted",
        "team.member_added",
        "team.member_removed",
        "user.created",
        "user.updated",
        "user.deleted",
    }


@both_databases
async def test_a_name_is_taken_once_and_unknown_ones_answer_404(fleet: Fleet) -> None:
    await make_user(fleet, "bob")
    await make_team(fleet, "rl")
    again = await fleet.admin.post("/api/users", json={"name": "bob", "level": "viewer"})
    assert again.status_code == 409 and "exists already" in again.json()["detail"]
    assert (await fleet.admin.post("/api/teams", json={"name": "rl"})).status_code == 409
    assert (await fleet.admin.get("/api/users/nobody")).status_code == 404
    missing = await fleet.admin.put("/api/teams/nowhere/members/bob")
    assert missing.status_code == 404 and "GET /api/teams" in missing.json()["detail"]
    assert (await fleet.admin.put("/api/teams/rl/members/nobody")).status_code == 404
    not_in = await fleet.admin.delete("/api/teams/rl/members/bob")
    assert not_in.status_code == 404 and "bob is not in team rl" in not_in.json()["detail"]


async def test_a_user_and_a_team_are_renamed_and_what_they_hold_follows(fleet: Fleet) -> None:
    """Users and teams could not be renamed: a typo in a name stayed for good."""
    await make_team(fleet, "vison")
    user = await make_user(fleet, "grace", "lead", team="vison")
    await key_of(fleet, "grace", "queue.read", "queue.submit")
    assert (await fleet.admin.put("/api/teams/vison/members/admin")).status_code == 200
    job = await fleet.submit(team="vison")

    team = await fleet.admin.patch("/api/teams/vison", json={"name": "vision", "weight": 2})
    assert team.status_code == 200, team.text
    assert (team.json()["name"], team.json()["weight"], team.json()["members"]) == (
        "vision",
        2,
        ["admin", "grace"],
    )
    renamed = await fleet.admin.patch(f"/api/users/{user['id']}", json={"name": "hopper"})
    assert renamed.status_code == 200, renamed.text
    assert (renamed.json()["name"], renamed.json()["teams"]) == ("hopper", ["vision"])

    assert (await fleet.admin.get("/api/teams/vison")).status_code == 404
    assert (await fleet.admin.get("/api/users/grace")).status_code == 404
    assert (await fleet.admin.get("/api/users/hopper")).json()["id"] == user["id"]
    shown = (await fleet.admin.get(f"/api/queue/{job['id']}")).json()
    assert shown["team"] == "vision"
    [key] = [
        k for k in (await fleet.admin.get("/api/admin/api-keys")).json() if k["name"] == "grace-key"
    ]
    assert key["user"] == "hopper"

    [team_row] = await fleet.audit(type="team.updated", target=team.json()["id"])
    assert team_row["detail"] == {"name": "vision", "weight": 2.0, "renamed_from": "vison"}
    [user_row] = await fleet.audit(type="user.updated", target=user["id"])
    assert user_row["detail"] == {"name": "hopper", "renamed_from": "grace"}

    same = await fleet.admin.patch("/api/users/hopper", json={"name": "hopper"})
    assert same.status_code == 200 and len(await fleet.audit(type="user.updated")) == 1
    await make_user(fleet, "ada")
    taken = await fleet.admin.patch("/api/users/ada", json={"name": "hopper"})
    assert taken.status_code == 409 and "exists already" in taken.json()["detail"]
    await make_team(fleet, "nlp")
    assert (await fleet.admin.patch("/api/teams/nlp", json={"name": "vision"})).status_code == 409
    bad = await fleet.admin.patch("/api/teams/nlp", json={"name": "a/b"})
    assert bad.status_code == 422 and "use letters, digits" in bad.json()["detail"]
    me = await fleet.admin.patch("/api/users/ada", json={"name": "me"})
    assert me.status_code == 422, me.text
    names = sorted(u["name"] for u in (await fleet.admin.get("/api/users")).json()["users"])
    assert names == ["ada", "admin", "hopper"]


@both_databases
async def test_a_change_to_people_or_their_usage_nudges_live_views(fleet: Fleet) -> None:
    """The Teams page re-reads on a `teams` nudge: sent when a change commits, not otherwise."""
    stream = await fleet.open_sse("/api/events", "", {"Authorization": f"Bearer {fleet.admin_key}"})
    hello = await stream.expect("hello")
    assert "teams" in hello["topics"]
    await make_team(fleet, "nlp")
    await stream.expect("teams")
    await make_user(fleet, "ann", team="nlp")
    await stream.expect("teams")
    await policy_loop.accrue_usage(fleet.ctx)  # the usage moved, a sample was taken
    await stream.expect("teams")
    refused = await fleet.admin.post("/api/teams", json={"name": "nlp"})
    assert refused.status_code == 409
    assert [e for e in await stream.collect(0.5) if e["type"] == "teams"] == []


async def test_a_default_team_must_be_one_of_the_users_teams(fleet: Fleet) -> None:
    await make_user(fleet, "carol")
    await make_team(fleet, "vision")
    answer = await fleet.admin.patch("/api/users/carol", json={"default_team": "vision"})
    assert answer.status_code == 422
    assert "carol is not in team vision" in answer.json()["detail"]
    assert "PUT /api/teams/vision/members/carol" in answer.json()["detail"]


async def test_a_team_with_jobs_waiting_or_running_is_not_deleted(fleet: Fleet) -> None:
    team = await make_team(fleet, "busy")
    for _ in range(2):
        job = await fleet.submit()
        async with fleet.ctx.store.write() as q:  # submit's --team is another helper's
            await q.update_job(job["id"], team_id=team["id"])
    answer = await fleet.admin.delete("/api/teams/busy")
    assert answer.status_code == 409
    assert "team busy has 2 jobs queued" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/teams/busy")).status_code == 200


async def test_a_teams_running_jobs_and_gpus_are_counted(fleet: Fleet) -> None:
    team = await make_team(fleet, "gpus")
    worker = await fleet.online_worker("w", gpu_count=2)
    job = await fleet.submit(gpu_count=2)
    async with fleet.ctx.store.write() as q:
        await q.update_job(job["id"], team_id=team["id"])
    await worker.run(await worker.next_offer())
    shown = (await fleet.admin.get("/api/teams/gpus")).json()
    assert (shown["running_jobs"], shown["running_gpus"]) == (1, 2)


# ---- names and numbers ------------------------------------------------------------------

HOSTILE_NAMES = ["", "a\x00b", "\ud800", "x\udfffy", "a" * 10_000, "a" * 65, "-dash", "a b", "me"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_hostile_names_are_refused_and_nothing_is_stored(fleet: Fleet, name: str) -> None:
    user = await post_raw(fleet.admin, "/api/users", {"name": name, "level": "viewer"})
    team = await post_raw(fleet.admin, "/api/teams", {"name": name})
    assert user.status_code in (400, 422), user.text
    if name != "me":  # a team may be called me
        assert team.status_code in (400, 422), team.text
    assert len(user.text) < 2000  # the name is not echoed back whole
    users = (await fleet.admin.get("/api/users")).json()["users"]
    assert [u["name"] for u in users] == ["admin"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_hostile_renames_are_refused_and_the_names_stay(fleet: Fleet, name: str) -> None:
    await make_team(fleet, "nlp")
    await make_user(fleet, "ann")
    user = await post_raw(fleet.admin, "/api/users/ann", {"name": name}, method="PATCH")
    team = await post_raw(fleet.admin, "/api/teams/nlp", {"name": name}, method="PATCH")
    assert user.status_code in (400, 422), user.text
    assert len(user.text) < 2000  # the name is not echoed back whole
    if name != "me":  # a team may be called me
        assert team.status_code in (400, 422), team.text
        assert (await fleet.admin.get("/api/teams/nlp")).status_code == 200
    assert (await fleet.admin.get("/api/users/ann")).status_code == 200
    assert await fleet.audit(type="user.updated") == []


async def test_a_name_refused_by_the_rule_says_the_rule(fleet: Fleet) -> None:
    answer = await fleet.admin.post("/api/users", json={"name": "a/b", "level": "viewer"})
    assert answer.status_code == 422
    assert "use letters, digits" in answer.json()["detail"]


HOSTILE_NUMBERS: list[Any] = [
    -1,
    2**31,
    2**64,
    10**400,
    float("nan"),
    float("inf"),
    "5; DROP TABLE users",
    [1],
]


@pytest.mark.parametrize("number", HOSTILE_NUMBERS)
async def test_hostile_limits_and_weights_are_refused(fleet: Fleet, number: Any) -> None:
    await make_team(fleet, "t")
    await make_user(fleet, "u")
    answers = [
        await post_raw(fleet.admin, "/api/teams", {"name": "t2", "weight": number}),
        await post_raw(fleet.admin, "/api/teams", {"name": "t3", "max_gpus": number}),
        await post_raw(
            fleet.admin, "/api/users", {"name": "u2", "level": "lead", "max_jobs": number}
        ),
        await post_raw(fleet.admin, "/api/teams/t", {"weight": number}, method="PATCH"),
        await post_raw(fleet.admin, "/api/users/u", {"max_queued": number}, method="PATCH"),
    ]
    assert [a.status_code for a in answers] == [422] * 5, [a.text for a in answers]
    team = (await fleet.admin.get("/api/teams/t")).json()
    assert team["weight"] == 1 and team["max_gpus"] is None
    assert {t["name"] for t in (await fleet.admin.get("/api/teams")).json()["teams"]} == {"t"}


async def test_a_weight_of_zero_and_a_null_weight_are_refused(fleet: Fleet) -> None:
    await make_team(fleet, "t")
    for weight in (0, -0.5, None, True):
        answer = await fleet.admin.patch("/api/teams/t", json={"weight": weight})
        assert answer.status_code == 422, (weight, answer.text)
    assert (await fleet.admin.get("/api/teams/t")).json()["weight"] == 1


# ---- who may do what --------------------------------------------------------------------


async def test_a_researchers_key_cannot_manage_people_but_sees_teams_and_itself(
    fleet: Fleet,
) -> None:
    await make_user(fleet, "rita", team=(await make_team(fleet, "nlp"))["name"])
    async with await key_of(fleet, "rita", "queue.read", "queue.submit") as rita:
        assert (await rita.get("/api/teams")).status_code == 200
        assert (await rita.get("/api/teams/nlp/usage")).json() == {"samples": []}
        me = (await rita.get("/api/users/me")).json()
        assert me["name"] == "rita" and me["level"] == "researcher" and me["keys"] == 1
        refused = [
            await rita.get("/api/users"),
            await rita.post("/api/users", json={"name": "x", "level": "admin"}),
            await rita.patch("/api/users/rita", json={"level": "admin"}),
            await rita.post("/api/teams", json={"name": "mine"}),
            await rita.put("/api/teams/nlp/members/admin"),
            await rita.delete("/api/teams/nlp"),
            await rita.post("/api/admin/api-keys", json={"name": "more", "permissions": ["*"]}),
        ]
    assert [a.status_code for a in refused] == [403] * len(refused)
    assert (await fleet.admin.get("/api/users/rita")).json()["level"] == "researcher"


async def test_a_key_does_no_more_than_its_users_level_allows(fleet: Fleet) -> None:
    await make_user(fleet, "lee", level="lead")
    minted = await fleet.admin.post(
        "/api/admin/api-keys", json={"name": "too much", "permissions": ["*"], "user": "lee"}
    )
    assert minted.status_code == 422
    detail = minted.json()["detail"]
    assert "lee is at level lead" in detail and "queue.approve" in detail  # what it allows
    async with await key_of(fleet, "lee", "queue.read", "metrics.read") as lee:
        assert (await lee.get("/metrics")).status_code == 200
        # lowered to researcher: the key keeps its permissions, the level takes metrics away
        await fleet.admin.patch("/api/users/lee", json={"level": "researcher"})
        lowered = await lee.get("/metrics")
        assert lowered.status_code == 403
        assert "level researcher does not allow 'metrics.read'" in lowered.json()["detail"]
        assert (await lee.get("/api/queue")).status_code == 200


async def test_keys_are_minted_for_the_callers_user_unless_told_and_listed_with_it(
    fleet: Fleet,
) -> None:
    await make_user(fleet, "dana", level="viewer")
    own = await fleet.admin.post("/api/admin/api-keys", json={"name": "mine", "permissions": ["*"]})
    assert own.json()["user"] == "admin"
    theirs = await fleet.admin.post(
        "/api/admin/api-keys",
        json={"name": "dana's", "permissions": ["queue.read"], "user": "dana"},
    )
    assert theirs.status_code == 201 and theirs.json()["user"] == "dana"
    nobody = await fleet.admin.post(
        "/api/admin/api-keys", json={"name": "x", "permissions": ["queue.read"], "user": "zed"}
    )
    assert nobody.status_code == 404
    listed = {k["name"]: k["user"] for k in (await fleet.admin.get("/api/admin/api-keys")).json()}
    assert listed == {"admin": "admin", "mine": "admin", "dana's": "dana"}


async def test_the_built_in_admin_is_never_deleted_nor_lowered(fleet: Fleet) -> None:
    deleted = await fleet.admin.delete(f"/api/users/{ADMIN_USER_ID}")
    assert deleted.status_code == 409 and "built-in user 'admin'" in deleted.json()["detail"]
    lowered = await fleet.admin.patch("/api/users/admin", json={"level": "lead"})
    assert lowered.status_code == 409 and "always an admin" in lowered.json()["detail"]
    assert (await fleet.admin.get("/api/users/me")).json()["level"] == "admin"
    assert await fleet.audit(type="user.") == []


async def test_an_admin_cannot_delete_or_lower_their_own_user(fleet: Fleet) -> None:
    await make_user(fleet, "ada", level="admin")
    async with await key_of(fleet, "ada", "*") as ada:
        deleted = await ada.delete("/api/users/ada")
        lowered = await ada.patch("/api/users/ada", json={"level": "viewer"})
    assert deleted.status_code == 409 and "your own user" in deleted.json()["detail"]
    assert lowered.status_code == 409 and "your own level" in lowered.json()["detail"]


@both_databases
async def test_deleting_a_user_revokes_their_keys_and_ends_their_streams(fleet: Fleet) -> None:
    await make_user(fleet, "eve")
    answer = await fleet.admin.post(
        "/api/admin/api-keys", json={"name": "eve", "permissions": ["queue.read"], "user": "eve"}
    )
    key = answer.json()["key"]
    stream = await fleet.open_sse("/api/events", "", {"Authorization": f"Bearer {key}"})
    assert stream.status == 200
    await stream.expect("hello")

    assert (await fleet.admin.delete("/api/users/eve")).status_code == 200

    assert await stream.wait_closed()
    async with fleet.client(headers={"Authorization": f"Bearer {key}"}) as eve:
        assert (await eve.get("/api/queue")).status_code == 401
    listed = [
        k for k in (await fleet.admin.get("/api/admin/api-keys")).json() if k["name"] == "eve"
    ]
    assert listed[0]["revoked"] is True and listed[0]["user"] is None
    (deleted,) = await fleet.audit(type="user.deleted")
    assert deleted["detail"]["keys_revoked"] == 1


# ---- the submitter's team ---------------------------------------------------------------


async def _resolve(fleet: Fleet, user: str, team: str | None) -> tuple[str, str | None]:
    async with fleet.ctx.store.read() as q:
        found = await q.user_by_ref(user)
        assert found is not None
        who, chosen = await people.resolve_submitter(q, found.id, team)
    return who.name, chosen.name if chosen else None


async def test_a_job_is_for_the_team_named_else_the_default_else_the_only_team(
    fleet: Fleet,
) -> None:
    for name in ("a", "b", "c"):
        await make_team(fleet, name)
    await make_user(fleet, "solo", team="a")
    await fleet.admin.patch("/api/users/solo", json={"default_team": None})
    await make_user(fleet, "multi", team="a")
    await fleet.admin.put("/api/teams/b/members/multi")
    await make_user(fleet, "loner")

    assert await _resolve(fleet, "solo", None) == ("solo", "a")  # their only team
    assert await _resolve(fleet, "multi", None) == ("multi", "a")  # their default
    assert await _resolve(fleet, "multi", "b") == ("multi", "b")
    assert await _resolve(fleet, "loner", None) == ("loner", None)
    await fleet.admin.patch("/api/users/multi", json={"default_team": None})
    assert await _resolve(fleet, "multi", None) == ("multi", None)  # two teams, no default

    with pytest.raises(Forbidden) as refused:
        await _resolve(fleet, "multi", "c")
    assert "multi is not in team c; submit for one of their teams (a, b)" in refused.value.message
    with pytest.raises(InvalidInput) as unknown:
        await _resolve(fleet, "multi", "zz")
    assert "there is no team 'zz'; multi is in: a, b" in unknown.value.message


@both_databases
async def test_hostile_names_in_the_path_answer_404_on_every_database(fleet: Fleet) -> None:
    await make_team(fleet, "t")
    for ref in ("%ED%A0%80", "%FF", "a" * 10_000, "x%20y", "u_admin%27--"):
        for answer in (
            await fleet.admin.get(f"/api/users/{ref}"),
            await fleet.admin.get(f"/api/teams/{ref}"),
            await fleet.admin.put(f"/api/teams/t/members/{ref}"),
            await fleet.admin.delete(f"/api/users/{ref}"),
        ):
            assert answer.status_code == 404, (ref[:20], answer.text[:200])
            assert len(answer.text) < 2000
    assert (await fleet.admin.get("/api/teams/t")).json()["members"] == []


async def test_only_a_star_key_mints_for_another_user(fleet: Fleet) -> None:
    await make_user(fleet, "lena", level="lead")
    answer = await fleet.admin.post(
        "/api/admin/api-keys",
        json={"name": "lena", "permissions": ["queue.read"], "user": "lena"},
    )
    lena = await auth.authenticate_key(fleet.ctx, answer.json()["key"], None, None)
    # the route asks for '*' first; the service holds the rule on its own all the same
    with pytest.raises(Forbidden, match="only a key with the '\\*' permission"):
        await auth.mint_api_key(fleet.ctx, "theirs", ["queue.read"], lena, None, user="admin")
    key, _raw, owner = await auth.mint_api_key(fleet.ctx, "own", ["queue.read"], lena, None)
    assert owner.name == "lena" and key.user_id == owner.id
