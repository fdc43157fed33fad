"""CPU each test spends, for finding what makes `make test` slow (#32): with
GPUFLEET_TEST_CPU=PREFIX, each test process appends a line per test to PREFIX.<worker>:
the test's id, its wall seconds, and the CPU seconds of the test process itself and of the
children it reaped meanwhile (the servers, workers and commands a test starts, counted when
they exit: a module's servers land on its last test). What the process spent before its
first test (importing every test module as it collected them: 15-20 CPU-s on a loaded
2-core machine) is a line of its own, `tests/(collection)`, not the first test's: it made a
long file scheduled first (tests/conftest.py's LONGEST_FIRST) look 17 CPU-s dearer than it is.
`scripts/test-cpu.py PREFIX` sums them by file. Off (no hook does anything) without the
variable."""

from __future__ import annotations

import os
import resource
import time

import pytest

PREFIX = os.environ.get("GPUFLEET_TEST_CPU")


def _now() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


_last = _now()


def _write(nodeid: str) -> None:
    global _last
    now = _now()
    wall, own, kids = (b - a for a, b in zip(_last, now, strict=True))
    _last = now
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{PREFIX}.{worker}", "a", encoding="utf-8") as out:
        out.write(f"{nodeid}\t{wall:.3f}\t{own:.3f}\t{kids:.3f}\n")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if PREFIX:
        _write("tests/(collection)")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if PREFIX:
        _write(nodeid)
