"""A user's level: what the people who share a fleet may do, named once.

Its own module so that both `permissions` (what a level may do) and `policy` (its default
priority, `policy.LEVEL_PRIORITY`, and its approvals) read it without importing each other.
"""

from __future__ import annotations

from enum import StrEnum


class Level(StrEnum):
    """SimpleTuner's queue levels, highest first."""

    ADMIN = "admin"
    LEAD = "lead"
    RESEARCHER = "researcher"
    VIEWER = "viewer"


ADMIN_USER_ID = "u_admin"  # the built-in user the first-start admin key belongs to
ADMIN_USER_NAME = "admin"
