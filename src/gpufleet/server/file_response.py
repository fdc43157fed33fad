"""A stored file served from the data folder: Starlette's `FileResponse` (Range, If-Range,
HEAD, `http.response.pathsend` where the server offers it) reading 4 MiB at a time.

uvicorn has no sendfile: each chunk is read on a thread and written to the socket from the
event loop. At Starlette's 64 KiB a chunk, those hops held a 1 GiB download near 100-200 MiB/s;
at 4 MiB it is bound by the copies themselves (docs/benchmarks.md, scenario 7). The ETag is
the file's sha256, known from its row: a client resuming with `If-Range` gets the rest of the
same bytes or the whole file again, never a mix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

CHUNK = 4 * 1024 * 1024


class StoredFileResponse(FileResponse):
    chunk_size = CHUNK

    def __init__(
        self,
        path: Path,
        *,
        sha256: str,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        sent: Callable[[int], object] | None = None,
    ) -> None:
        """`sent` is told the size of every chunk of the body as it goes (a metric)."""
        super().__init__(
            path, media_type=media_type, headers={**(headers or {}), "ETag": f'"{sha256}"'}
        )
        self._sent = sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._sent is None:
            await super().__call__(scope, receive, send)
            return
        count = self._sent

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.body":
                count(len(message.get("body", b"")))
            elif message["type"] == "http.response.pathsend":
                count(int(self.headers["content-length"]))
            await send(message)

        await super().__call__(scope, receive, counted)


def served(
    source: Path | AsyncIterator[bytes],
    *,
    size: int,
    sha256: str,
    media_type: str,
    headers: Mapping[str, str] | None = None,
    sent: Callable[[int], object] | None = None,
) -> Response:
    """A stored file's answer: the file itself from the data folder (`source` a path), else
    the store's stream of its `size` bytes."""
    if isinstance(source, Path):
        return StoredFileResponse(
            source, sha256=sha256, media_type=media_type, headers=headers, sent=sent
        )
    length = {"Content-Length": str(size)}
    return StreamingResponse(source, media_type=media_type, headers={**(headers or {}), **length})
