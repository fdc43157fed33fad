"""The log shipper numbers its batches so a re-sent one is stored once."""

from __future__ import annotations

import contextlib

from gpufleet.domain import bounds
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


async def test_a_batch_never_passes_the_orchestrators_bound_and_every_line_goes_in_order():
    buffer = LogBuffer(flush_lines=10_000)
    sent: list[list[str]] = []

    async def send(batch: list[Line], first: int) -> None:
        texts = [line["text"] for line in batch]
        assert bounds.log_batch_problem(texts) is None
        assert len(batch) <= bounds.MAX_LOG_BATCH_LINES
        sent.append(texts)

    wide = [f"{i:03d}" + "é" * 32_000 for i in range(40)]  # 64 KiB of UTF-8 each
    for text in wide + [f"short {i}" for i in range(2500)]:
        buffer.add("stdout", text)
    await LogShipper(buffer, send, interval=0.01).flush()

    assert [text for batch in sent for text in batch] == wide + [f"short {i}" for i in range(2500)]
    assert [len(batch) for batch in sent][:3] == [16, 16, 1000]  # 16 lines of 64 KiB fit in 1 MiB
    assert len(buffer) == 0


async def test_one_line_over_the_bound_alone_is_cut_to_it_not_refused():
    buffer = LogBuffer()
    sent: list[str] = []

    async def send(batch: list[Line], first: int) -> None:
        sent.extend(line["text"] for line in batch)

    buffer.add("stdout", "x" * (bounds.MAX_LOG_BATCH_BYTES + 10))
    buffer.add("stdout", "next")
    await LogShipper(buffer, send, interval=0.01).flush()

    assert [len(text) for text in sent] == [bounds.MAX_LOG_BATCH_BYTES, 4]
