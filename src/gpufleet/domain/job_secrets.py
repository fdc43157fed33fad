"""Secrets for jobs: what a secret's name and value may be, who may write one, how a config's
env refers to one (`"env": {"HF_TOKEN": {"secret": "hf"}}`), and which plain env values are
credentials shown masked to anyone but their owner.

A secret belongs to a user or to a team. A job's reference resolves to its submitter's secret
of that name, else its team's (`resolve`). The value is sealed at rest (domain/secrets.py) and
reaches only the job's process environment: the worker fetches it for its live attempt."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpufleet.domain.levels import Level
from gpufleet.errors import InvalidInput

SECRET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SECRET_NAME_RULE = (
    "use lowercase letters, digits, '_' and '-' (at most 64, starting with a letter or digit)"
)
MAX_SECRET_BYTES = 64 * 1024
SEAL_PURPOSE = "job secret"
MASK = "****"

# A plain env value is a credential when its name says so: HF_TOKEN, AWS_SECRET_ACCESS_KEY,
# WANDB_API_KEY, DB_PASSWORD, GITHUB_PAT, a bare TOKEN ...
_CREDENTIAL_NAME = re.compile(
    r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|PAT|CREDENTIALS?|AUTH|APIKEY)(_|$)",
    re.IGNORECASE,
)


class Scope(StrEnum):
    USER = "user"
    TEAM = "team"


@dataclass(frozen=True, slots=True)
class JobSecret:
    """A secret as stored: its value sealed (`domain.secrets.seal_secret`), never shown."""

    scope: Scope
    owner_id: str  # the user's or the team's id
    name: str
    value_sealed: str
    created_at: datetime
    updated_at: datetime
    written_by: str  # the actor who last wrote it


def check_name(name: str) -> str:
    if not SECRET_NAME.fullmatch(name):
        raise InvalidInput(f"secret name {name[:80]!r} is not valid; {SECRET_NAME_RULE}")
    return name


def check_value(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput("a secret's 'value' must be a non-empty string")
    if "\x00" in value:
        raise InvalidInput("a secret's value contains a NUL character, which no process env holds")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SECRET_BYTES:
        raise InvalidInput(f"a secret's value is larger than {MAX_SECRET_BYTES // 1024} KiB")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidInput("a secret's value is not valid text (a lone surrogate)") from None
    return value


def sealed_owner(scope: Scope, owner_id: str, name: str) -> str:
    """What a sealed value is bound to: moved to another row, it no longer opens."""
    return f"{scope.value}:{owner_id}:{name}"


def may_write(
    level: Level, teams: frozenset[str], scope: Scope, owner_id: str, user_id: str
) -> bool:
    """A user writes and deletes their own secrets; a team's, its leads and admins; admins any."""
    if level is Level.ADMIN:
        return True
    if scope is Scope.USER:
        return owner_id == user_id
    return level is Level.LEAD and owner_id in teams


def may_see(level: Level, teams: frozenset[str], scope: Scope, owner_id: str, user_id: str) -> bool:
    """Whose secrets' names a user lists: their own, their teams', and every one for admins."""
    if level is Level.ADMIN:
        return True
    return owner_id == user_id if scope is Scope.USER else owner_id in teams


# ---- references in a config's env -----------------------------------------------------------


def reference(env_name: str, value: Any) -> str | None:
    """The secret name a config's env value refers to; None for a plain string; InvalidInput
    naming the field for anything else."""
    if isinstance(value, str):
        return None
    field = f"config field 'env.{env_name}'"
    if not isinstance(value, Mapping) or set(value) != {"secret"}:
        raise InvalidInput(
            f'{field} must be a string or a secret reference like {{"secret": "hf"}}, '
            f"got {str(value)[:200]}"
        )
    name = value["secret"]
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
        raise InvalidInput(
            f"{field} refers to secret {str(name)[:80]!r}, which is not a name; {SECRET_NAME_RULE}"
        )
    return name


def references(config: Mapping[str, Any]) -> dict[str, str]:
    """Env name → secret name, for every reference in the (checked) config's env."""
    env = config.get("env")
    if not isinstance(env, Mapping):
        return {}
    refs = {}
    for env_name, value in env.items():
        secret = reference(env_name, value)
        if secret is not None:
            refs[env_name] = secret
    return refs


def plain_env(config: Mapping[str, Any]) -> dict[str, str]:
    """The env's plain values: what a job's offer carries (references stay names)."""
    env = config.get("env")
    if not isinstance(env, Mapping):
        return {}
    return {k: v for k, v in env.items() if isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class Unresolved:
    env_name: str
    secret: str


def resolve(
    refs: Mapping[str, str], user_has: Mapping[str, str], team_has: Mapping[str, str]
) -> tuple[dict[str, str], list[Unresolved]]:
    """Each reference's value: the submitter's secret of that name, else the team's; the
    references neither holds, for a clear refusal."""
    found: dict[str, str] = {}
    missing = []
    for env_name, secret in refs.items():
        value = user_has.get(secret, team_has.get(secret))
        if value is None:
            missing.append(Unresolved(env_name, secret))
        else:
            found[env_name] = value
    return found, missing


def say_missing(missing: list[Unresolved], user: str, team: str | None) -> str:
    """Why a job cannot have its secrets, and what to do about it."""
    holders = f"neither user {user} nor team {team} has" if team else f"user {user} has not"
    refs = ", ".join(f"env {m.env_name} refers to secret {m.secret!r}" for m in missing)
    return (
        f"{refs}, which {holders}; set it with `gpufleet secrets set NAME` "
        "(PUT /api/secrets/NAME) and submit again"
    )


# ---- credentials in plain env values ----------------------------------------------------------


def looks_like_credential(env_name: str) -> bool:
    return _CREDENTIAL_NAME.search(env_name) is not None


def masked(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as shown to anyone but its owner: plain env values that look like
    credentials replaced by `MASK` (references are names, shown as they are)."""
    env = config.get("env")
    if not isinstance(env, Mapping) or not any(
        isinstance(v, str) and looks_like_credential(k) for k, v in env.items()
    ):
        return dict(config)
    shown = {
        k: MASK if isinstance(v, str) and looks_like_credential(k) else v for k, v in env.items()
    }
    return {**config, "env": shown}


def shown(config: Mapping[str, Any], owner_id: str | None, viewer_id: str) -> dict[str, Any]:
    """The config as `viewer_id` sees it: whole for its owner, `masked` for anyone else."""
    return dict(config) if owner_id is not None and owner_id == viewer_id else masked(config)
