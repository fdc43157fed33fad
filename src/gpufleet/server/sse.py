"""Server-Sent Events: framing, and a streaming response that never buffers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import StreamingResponse

PING_SECONDS = 15.0


def frame(data: dict[str, Any], event: str | None = None, event_id: int | None = None) -> bytes:
    head = b""
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    if event_id is not None:
        head += b"id: " + str(event_id).encode() + b"\n"
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def ping() -> bytes:
    return frame({"type": "ping"}, event="ping")


def stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "Connection": "keep-alive",
        },
    )
