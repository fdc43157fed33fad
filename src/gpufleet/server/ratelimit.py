"""Failed authentication, limited per client address (a sliding window, per process).

Credentials are checked before the limiter is asked (services/auth.py): only failed attempts
count, and while an address is locked out only its failing requests are refused. A valid key
or token is never throttled, so nobody behind the same NAT or proxy can lock a worker out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class FailureLimiter:
    def __init__(
        self, limit: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, client: str) -> deque[float]:
        now = self._clock()
        failures = self._failures.setdefault(client, deque())
        while failures and now - failures[0] > self.window:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return deque()
        return failures

    def retry_after(self, client: str | None) -> float:
        """Seconds this client must wait before trying again; 0 when it may try now."""
        if client is None or self.limit <= 0:
            return 0.0
        failures = self._recent(client)
        if len(failures) < self.limit:
            return 0.0
        return max(0.0, self.window - (self._clock() - failures[0]))

    def failed(self, client: str | None) -> bool:
        """Record a failure; True when this one reached the limit."""
        if client is None or self.limit <= 0:
            return False
        failures = self._recent(client)
        failures.append(self._clock())
        self._failures[client] = failures
        return len(failures) == self.limit
