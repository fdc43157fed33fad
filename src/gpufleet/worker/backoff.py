"""Exponential backoff with jitter, for reconnecting and for retrying a report."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays of base, 2·base, 4·base … up to `cap`, each scaled by a random 50 to 100 %, so
    that a fleet cut off together does not come back in lockstep."""

    base: float
    cap: float
    rand: Callable[[], float] = field(default=random.random)
    attempt: int = 0

    def next(self) -> float:
        delay = min(self.cap, self.base * 2 ** min(self.attempt, 32))
        self.attempt += 1
        return float(delay * (0.5 + self.rand() / 2))

    def reset(self) -> None:
        self.attempt = 0
