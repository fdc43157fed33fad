"""Machines on a real network for multi-node tests: `machines(n)` gives n network namespaces
on a bridge (tests/netns.py), removed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.netns import Network, network, skip_reason


@pytest.fixture
def machines() -> Iterator[Callable[[int], Network]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ExitStack() as stack:
        yield lambda count: stack.enter_context(network(count))
