"""PostgreSQL advisory-lock keys: every lock the orchestrators take on one database.

Each key is four ASCII letters read as a big-endian integer. The values never change: a
fleet that runs two versions side by side during an upgrade must still agree on them.
SQLite needs none of these (it has one writer, and the store refuses a second process).
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.store.direct import Direct

MIGRATION: Final = 0x6770_666C  # "gpfl": one migrator at a time, until its commit
LEADER: Final = 0x6770_666D  # "gpfm": the replica that runs the sweeps, for its session
AUDIT_CHAIN: Final = 0x6772_6161  # "graa": one appender to the audit chain, until commit
# (and the dispatch turn: server/services/dispatch.py `LastLook`)
API_KEYS: Final = 0x6772_6162  # "grab": one first-start admin key, however many replicas start
GANG_ROUND: Final = 0x6772_6763  # "grgc": one gang round (claims and holds) at a time, until commit


_HOLD = Direct(sa.text("SELECT pg_advisory_xact_lock(:k)"))  # every audited write's


async def hold_until_commit(conn: AsyncConnection, key: int) -> None:
    """Take `key` for the rest of the transaction on `conn` (PostgreSQL only)."""
    await _HOLD.rows(conn, {"k": key})
