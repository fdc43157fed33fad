"""The log shipper numbers its batches so a re-sent one is stored once."""

from __future__ import annotations

import contextlib

from gpufleet.worker.errors import Unreachable
from gpufleet.worker.logship import Line, LogBuffer, LogShipper


async def test_each_batch_carries_the_index_of_its_first_line_and_a_retry_repeats_it():
    buffer = LogBuffer(flush_lines=2)
    sent: list[tuple[int, list[str]]] = []
    fail_next = [True]

    async def send(batch: list[Line], first: int) -> None:
        sent.append((first, [line["text"] for line in batch]))
        if fail_next[0]:
            fail_next[0] = False
            raise Unreachable("the orchestrator went away after storing the batch")

    shipper = LogShipper(buffer, send, interval=0.01)
    for text in ("a", "b"):
        buffer.add("stdout", text)
    with contextlib.suppress(Unreachable):
        await shipper.flush()
    buffer.add("stdout", "c")
    await shipper.flush()
    assert sent == [(0, ["a", "b"]), (0, ["a", "b", "c"])]
    assert buffer.position == 3 and len(buffer) == 0
