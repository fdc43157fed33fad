"""Server-Sent Events decoded from the bytes of a response body, for the simulated workers.

What gpufleet's streams need of the WHATWG rules: a line ends in LF or CRLF (the server
never ends one with a lone CR); `event:` names the event and `data:` adds a line to its data
(one space after the colon is dropped); a blank line dispatches the event when it has data;
a line starting with ':' is a comment. Other fields (`id:`, `retry:`) are ignored: the
simulated workers never resume a stream where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    event: str  # "message" when the block named none
    data: str


class Decoder:
    """One stream's events, fed its body in chunks split anywhere, even inside a CRLF."""

    __slots__ = ("_data", "_event", "_tail")

    def __init__(self) -> None:
        self._tail = b""  # an unfinished last line, kept until the rest of it arrives
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Event]:
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        events = []
        for raw in lines:
            line = raw.decode("utf-8", "replace").removesuffix("\r")
            if not line:
                if self._data:
                    events.append(Event(self._event or "message", "\n".join(self._data)))
                self._event, self._data = "", []
            elif line[0] != ":":
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    self._data.append(value)
                elif name == "event":
                    self._event = value
        return events
