"""Keep-alives on real streams (docs/protocol.md: a `ping` every 15 s of quiet, the default of
--stream-ping-interval): one clock a server process pings every quiet stream, each from its
own last write, and a stream whose client went away is noticed and leaves it. The server here
pings every 2 s (the default is checked beside the spec's other defaults)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gpufleet.server.sse import PING_BATCH
from tests.e2e.conftest import FakeWorker, ServerProcess, serving, unique
from tests.waiting import wait_until

PING_SECONDS = 2.0  # --stream-ping-interval
PHASE = 1.0  # the second stream opens this much later: its pings keep their own phase
LATE = 1.5  # what a loaded machine may add to a ping's way


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(
        tmp_path_factory.mktemp("orchestrator"), **{"stream-ping-interval": PING_SECONDS}
    )


def _presence(server: ServerProcess, worker: FakeWorker) -> str:
    with server.admin() as admin:
        return str(admin.get(f"/api/admin/workers/{worker.id}").json()["presence"])


def _first(arrivals: list[tuple[float, str]], type_: str) -> float:
    return next(at for at, seen in arrivals if seen == type_)


def test_each_quiet_stream_is_pinged_the_interval_after_its_own_last_write(
    server: ServerProcess,
) -> None:
    first, second = FakeWorker(server, unique("quiet")), FakeWorker(server, unique("quiet"))
    try:
        for worker in (first, second):
            worker.register(name=worker.id)
            worker.keep_alive()  # heartbeats, which the stream does not carry
        early = first.connect()
        time.sleep(PHASE)  # not a wait for something: the second stream's own phase
        late = second.connect()
        for stream in (early, late):
            stream.next("ping", timeout=PING_SECONDS + PHASE + LATE)
        gaps = [_first(s.arrivals, "ping") - _first(s.arrivals, "connected") for s in (early, late)]
        least = PING_SECONDS * (1 - PING_BATCH) - 0.1
        assert all(least <= gap <= PING_SECONDS + LATE for gap in gaps), gaps
        # Not one round for every stream: the later stream's ping comes later too.
        apart = _first(late.arrivals, "ping") - _first(early.arrivals, "ping")
        assert apart >= PHASE - PING_SECONDS * PING_BATCH - 0.5, apart

        early.close()  # the client goes: the server notices, the worker's stream is gone
        wait_until(
            lambda: _presence(server, first) == "disconnected",
            timeout=20,
            message="the server to notice the stream's client left",
        )
        assert _presence(server, second) != "disconnected"
    finally:
        first.close()
        second.close()
