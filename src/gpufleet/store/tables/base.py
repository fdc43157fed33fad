"""What every table is built on: the one `metadata` (Alembic's env compares the migrations
with it), and the column types of both engines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from gpufleet.errors import StoreError


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every engine (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise StoreError(f"the database returned {value!r} for a timestamp; check the schema")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
