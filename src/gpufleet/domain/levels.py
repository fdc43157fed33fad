"""A user's level: what their keys may do, and the priority their jobs get by default.

The names and priorities are SimpleTuner's Job Queue's (admin 30 "urgent", lead 20 "high",
researcher 10 "normal", viewer 0 "low")."""

from __future__ import annotations

from enum import StrEnum


class Level(StrEnum):
    ADMIN = "admin"
    LEAD = "lead"
    RESEARCHER = "researcher"
    VIEWER = "viewer"


LEVEL_PRIORITY: dict[Level, int] = {
    Level.ADMIN: 30,
    Level.LEAD: 20,
    Level.RESEARCHER: 10,
    Level.VIEWER: 0,
}

ADMIN_USER_ID = "u_admin"  # the built-in user the first-start admin key belongs to
ADMIN_USER_NAME = "admin"
