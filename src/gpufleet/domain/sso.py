"""Single sign-on (docs/security.md, Single sign-on): what an identity provider's claims make
of a gpufleet user. Pure rules; `services/sso.py` applies them at every sign-in.

A person is keyed by the provider's issuer and subject (`sub`), never by a name: a user
renamed at the provider, or one whose `preferred_username` is another's, takes over nobody.
Their level and the teams the mapping names follow the groups of each sign-in, so a person
taken out of the admins' group is no admin from their next sign-in on.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpufleet.domain.levels import Level
from gpufleet.domain.people import PERSON_NAME

# Highest first, as `Level` lists them: a person in two mapped groups gets the higher level.
_RANK = {level: i for i, level in enumerate(Level)}
GROUP_MAP_RULE = "write each entry GROUP=LEVEL or GROUP=LEVEL:TEAM, e.g. gpu-admins=admin"


@dataclass(frozen=True, slots=True)
class GroupRule:
    """What membership of one provider group gives: a level, and maybe a team."""

    group: str
    level: Level
    team: str | None


def parse_group_map(entries: Iterable[str]) -> tuple[GroupRule, ...]:
    """`--oidc-group-map`'s entries; a ValueError naming the first bad one."""
    rules = []
    for entry in entries:
        group, eq, rest = entry.partition("=")
        level_text, _, team = rest.partition(":")
        group, level_text, team = group.strip(), level_text.strip(), team.strip()
        if not eq or not group:
            raise ValueError(f"group map entry {entry!r} has no GROUP=; {GROUP_MAP_RULE}")
        try:
            level = Level(level_text)
        except ValueError:
            levels = ", ".join(v.value for v in Level)
            raise ValueError(
                f"group map entry {entry!r}: {level_text!r} is not a level ({levels})"
            ) from None
        if team and not PERSON_NAME.fullmatch(team):
            raise ValueError(f"group map entry {entry!r}: {team!r} is not a valid team name")
        rules.append(GroupRule(group, level, team or None))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class Standing:
    """What a sign-in makes of a person: their level, the mapped teams they are in, and the
    mapped teams they are not (left, if they were members)."""

    level: Level
    teams: frozenset[str]
    not_teams: frozenset[str]


def groups_of(claims: Mapping[str, Any], claim: str) -> frozenset[str]:
    """The groups a token's claim lists: a list of strings, or one string; else none."""
    value = claims.get(claim)
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list | tuple):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def standing(groups: frozenset[str], rules: Iterable[GroupRule], default_level: Level) -> Standing:
    """The highest level the person's mapped groups give (none: `default_level`), and the
    mapped teams, in and out."""
    mine = [r for r in rules if r.group in groups]
    level = min((r.level for r in mine), key=_RANK.__getitem__, default=default_level)
    teams = frozenset(r.team for r in mine if r.team)
    every = frozenset(r.team for r in rules if r.team)
    return Standing(level, teams, every - teams)


_NOT_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")


def user_name(claims: Mapping[str, Any], issuer: str, subject: str) -> str:
    """A new user's name: `preferred_username`, else the email's, else one made of the
    subject; cut to the name rule. Only ever a first guess: `services/sso.py` adds a suffix
    when it is taken, and the identity, not the name, says who signs in."""
    for claim in ("preferred_username", "email"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            name = _NOT_NAME.sub("-", value.strip()).strip("-._")[:48]
            if name and PERSON_NAME.fullmatch(name) and name != "me":
                return name
    return "sso-" + identity_digest(issuer, subject)[:12]


def identity_digest(issuer: str, subject: str) -> str:
    return hashlib.sha256(f"{issuer}\x00{subject}".encode()).hexdigest()


def taken_name(name: str, issuer: str, subject: str) -> str:
    """Another name for a person whose first guess is someone else's: stable per identity."""
    return f"{name[:48]}-{identity_digest(issuer, subject)[:6]}"


def check_issuer(url: str) -> bool:
    """An issuer is reached over TLS, but for a provider on this machine's loopback."""
    split = urlsplit(url)
    if split.scheme == "https" and split.hostname:
        return True
    return split.scheme == "http" and split.hostname in ("127.0.0.1", "localhost", "::1")
