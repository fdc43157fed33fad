"""Secrets for jobs (domain/job_secrets.py): written and deleted by their owners, listed by
name only, checked at submit, and opened only for a job's live attempt on its worker.

The value is sealed under the server's key (as webhook secrets are) and bound to its row;
nothing here logs, audits or answers it, except `for_attempt` to the worker that runs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.domain import job_secrets as rules
from gpufleet.domain.job_secrets import JobSecret, Scope
from gpufleet.domain.records import Job, Team, User, Worker
from gpufleet.domain.secrets import open_secret, seal_secret
from gpufleet.errors import Forbidden, InvalidInput, NotFound
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import attempt_tokens
from gpufleet.server.services.job_fence import live_job, offered_job
from gpufleet.store.queries import Queries


@dataclass(frozen=True, slots=True)
class Listed:
    """A secret as listed: whose, and who wrote it when; never its value."""

    secret: JobSecret
    owner_name: str


async def _owner(q: Queries, user: User, team: str | None) -> tuple[Scope, str, str]:
    """The scope, owner id and name that the caller writes to: a team's (named by id or
    name), else their own; Forbidden unless `rules.may_write` allows it."""
    if team is None:
        return Scope.USER, user.id, user.name
    found = await q.team_by_ref(team)
    if found is None:
        raise NotFound(f"no team {team[:64]!r}; list the teams with GET /api/teams")
    theirs = frozenset(t.id for t in await q.teams_of(user.id))
    if not rules.may_write(user.level, theirs, Scope.TEAM, found.id, user.id):
        raise Forbidden(
            f"only team {found.name}'s leads and admins write or delete its secrets; "
            "ask one of them, or set your own secret (without a team)",
            cli=f"only team {found.name}'s leads and admins may do that; leave out --team to "
            "use your own secret",
        )
    return Scope.TEAM, found.id, found.name


async def put(
    ctx: Context,
    user: User,
    team: str | None,
    name: str,
    value: Any,
    actor: str,
    client: str | None,
) -> Listed:
    rules.check_name(name)
    value = rules.check_value(value)
    async with transaction(ctx) as tx:
        scope, owner_id, owner_name = await _owner(tx.q, user, team)
        sealed = seal_secret(
            ctx.audit_key, rules.SEAL_PURPOSE, rules.sealed_owner(scope, owner_id, name), value
        )
        created = await tx.q.put_secret(scope, owner_id, name, sealed, actor, tx.now)
        # Never the value: which secret, whose, and that it was written.
        tx.audit(
            "secret.created" if created else "secret.updated",
            actor,
            f"{scope.value}:{owner_name}:{name}",
            client,
            scope=scope.value,
            owner_id=owner_id,
            name=name,
        )
        written = await tx.q.secrets_of(scope, owner_id, [name])
    return Listed(written[0], owner_name)


async def delete(
    ctx: Context, user: User, team: str | None, name: str, actor: str, client: str | None
) -> None:
    rules.check_name(name)
    async with transaction(ctx) as tx:
        scope, owner_id, owner_name = await _owner(tx.q, user, team)
        if not await tx.q.delete_secret(scope, owner_id, name):
            raise NotFound(
                f"{owner_name} has no secret {name!r}; list them with GET /api/secrets",
                cli=f"{owner_name} has no secret {name!r}; list them with `gpufleet secrets list`",
            )
        tx.audit(
            "secret.deleted",
            actor,
            f"{scope.value}:{owner_name}:{name}",
            client,
            scope=scope.value,
            owner_id=owner_id,
            name=name,
        )


async def list_visible(ctx: Context, user: User) -> list[Listed]:
    """The secrets the caller may see the names of (`rules.may_see`), without values."""
    async with ctx.store.read() as q:
        theirs = frozenset(t.id for t in await q.teams_of(user.id))
        every = await q.list_secrets()
        owners = {s.owner_id for s in every}
        names = dict(await q.user_names(owners)) | dict(await q.team_names(owners))
    return [
        Listed(s, names.get(s.owner_id, s.owner_id))
        for s in every
        if rules.may_see(user.level, theirs, s.scope, s.owner_id, user.id)
    ]


# ---- a job's references -----------------------------------------------------------------------


async def _values(
    ctx: Context, q: Queries, refs: Mapping[str, str], user_id: str, team_id: str | None
) -> tuple[dict[str, str], list[rules.Unresolved]]:
    wanted = set(refs.values())

    async def opened(scope: Scope, owner_id: str) -> dict[str, str]:
        out = {}
        for s in await q.secrets_of(scope, owner_id, wanted):
            value = open_secret(
                ctx.audit_key,
                rules.SEAL_PURPOSE,
                rules.sealed_owner(scope, owner_id, s.name),
                s.value_sealed,
            )
            if value is not None:  # sealed under another key: as if it were not there
                out[s.name] = value
        return out

    user_has = await opened(Scope.USER, user_id)
    team_has = await opened(Scope.TEAM, team_id) if team_id else {}
    return rules.resolve(refs, user_has, team_has)


async def check_resolvable(
    ctx: Context, q: Queries, config: Mapping[str, Any], user: User, team: Team | None
) -> None:
    """Refuse a submit whose env refers to a secret neither its user nor its team has.
    Reads nothing for a config without references (the usual submit)."""
    refs = rules.references(config)
    if not refs:
        return
    _found, missing = await _values(ctx, q, refs, user.id, team.id if team else None)
    if missing:
        raise InvalidInput(rules.say_missing(missing, user.name, team.name if team else None))


async def for_attempt(
    ctx: Context, worker: Worker, job_id: str, attempt_id: str | None, attempt_token: str | None
) -> dict[str, str]:
    """The values of the job's references, for its live attempt on this worker only (403 for
    another worker's job, or without the attempt's own token from a worker that binds its
    calls to attempts; 409 for an attempt not live); a secret deleted since the submit is
    refused, and the attempt fails."""
    async with ctx.store.read() as q:
        await offered_job(q, worker, job_id, node=True)
        if not attempt_id:
            raise InvalidInput("name the attempt the secrets are for: ?attempt_id=<your attempt>")
        attempt_tokens.check(ctx.audit_key, worker, attempt_id, attempt_token)
        job: Job = await live_job(q, worker, job_id, attempt_id, lock=False, node=True)
        refs = rules.references(job.config)
        if not refs:
            return {}
        if job.user_id is None:
            raise InvalidInput(f"job {job_id} has no user whose secrets it could use")
        found, missing = await _values(ctx, q, refs, job.user_id, job.team_id)
        if missing:
            names = await q.user_names([job.user_id])
            teams = await q.team_names([job.team_id]) if job.team_id else {}
            raise InvalidInput(
                rules.say_missing(
                    missing,
                    names.get(job.user_id, job.user_id),
                    teams.get(job.team_id, job.team_id) if job.team_id else None,
                ).replace("submit again", "re-run the job")
            )
    return found
