"""The webhooks as this process last read them in a write (SQLite: one process writes).

Every job's end asks which webhooks hear it (`services/webhooks.py`): usually none, and the
answer changes only when a webhook is created, changed or deleted. On SQLite one process owns
the database (the store's lock file) and makes those writes through `queries/webhooks.py`,
which notes them; the store forgets the list when such a transaction commits. The list is
kept only from a read inside a write transaction that wrote no webhook (the one write lock
held: no other write can be under way). On PostgreSQL another replica may change a webhook
at any moment, so there is no cache there.
"""

from __future__ import annotations

from gpufleet.domain.webhooks import Webhook


class WebhookCache:
    __slots__ = ("webhooks",)

    def __init__(self) -> None:
        self.webhooks: list[Webhook] | None = None  # None: read them

    def evict(self) -> None:
        """A webhook changed: the next job's end reads them again."""
        self.webhooks = None
