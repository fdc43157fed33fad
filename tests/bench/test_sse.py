"""The simulated workers' Server-Sent Events decoder (bench/sse.py)."""

from __future__ import annotations

from bench.sse import Decoder, Event

STREAM = (
    b": a comment, ignored\n"
    b"event: ping\n"
    b'data: {"type": "ping"}\n'
    b"\n"
    b"id: 7\n"
    b"data: first line\n"
    b"data:second line, no space\n"
    b"data:  two spaces keep one\n"
    b"retry: 1000\n"
    b"\n"
    b"event: job_submit\r\n"
    b'data: {"job_id": "j_1"}\r\n'
    b"\r\n"
    b"event: nothing to dispatch\n"
    b": no data in this block\n"
    b"\n"
    b"data\n"
    b"\n"
    b"data: caf\xc3\xa9\n"
    b"\n"
    b"data: never finished\n"
)

EVENTS = [
    Event("ping", '{"type": "ping"}'),
    Event("message", "first line\nsecond line, no space\n two spaces keep one"),
    Event("job_submit", '{"job_id": "j_1"}'),
    Event("message", ""),
    Event("message", "café"),
]


def decode(*chunks: bytes) -> list[Event]:
    decoder = Decoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_a_stream_in_one_piece_gives_each_complete_event_with_its_name_and_joined_data() -> None:
    assert decode(STREAM) == EVENTS


def test_a_stream_split_at_any_byte_gives_the_same_events() -> None:
    for at in range(len(STREAM) + 1):
        assert decode(STREAM[:at], STREAM[at:]) == EVENTS, f"split at byte {at}"


def test_a_stream_fed_one_byte_at_a_time_gives_the_same_events() -> None:
    assert decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == EVENTS


def test_an_event_is_dispatched_only_once_its_blank_line_arrives() -> None:
    decoder = Decoder()
    assert decoder.feed(b"event: job_submit\ndata: {}\n") == []
    assert decoder.feed(b"\r") == []
    assert decoder.feed(b"\n") == [Event("job_submit", "{}")]
    # The name does not carry over to the next block.
    assert decoder.feed(b"data: x\n\n") == [Event("message", "x")]
