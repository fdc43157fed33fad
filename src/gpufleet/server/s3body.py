"""The body of an S3 PUT as boto3 sends it, decoded and checked while it streams.

Over plain HTTP boto3 sends the bytes as they are, with their sha256 (`X-Amz-Content-SHA256`)
and a CRC32 (`x-amz-checksum-crc32`) in headers. Over HTTPS it sends `Content-Encoding:
aws-chunked`: chunks framed as `<hex size>[;chunk-signature=…]\\r\\n<bytes>\\r\\n`, a last
`0` chunk, then trailer lines (`x-amz-checksum-crc32:<base64>`), with the decoded length in
`X-Amz-Decoded-Content-Length`. Either way the bytes pass through in pieces, never whole; a
length or checksum that does not match raises `ArtifactCorrupt` at the end of the stream, so
the write it feeds is aborted and nothing is stored.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass, field

from gpufleet.errors import ArtifactCorrupt, InvalidInput

_LINE_MAX = 4096  # a chunk header or trailer line; real ones are under 100 bytes
_SIZE = re.compile(rb"[0-9a-fA-F]{1,15}")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")
CHECKSUM_HEADERS = ("crc32", "sha256", "sha1", "crc32c", "crc64nvme")


@dataclass
class S3Body:
    """What the headers promise about a PUT's body; `decoded` yields its bytes."""

    chunked: bool
    length: int | None  # the decoded length, when told
    sha256: str | None  # hex, when the client signed the payload
    checksums: dict[str, str] = field(default_factory=dict)  # algorithm → base64, from headers
    trailers: dict[str, str] = field(default_factory=dict)
    md5: hashlib._Hash = field(default_factory=hashlib.md5)

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> S3Body:
        encodings = [e.strip().lower() for e in headers.get("content-encoding", "").split(",")]
        chunked = "aws-chunked" in encodings
        told = headers.get("x-amz-decoded-content-length" if chunked else "content-length")
        if chunked and told is None:
            raise InvalidInput(
                "an aws-chunked body needs X-Amz-Decoded-Content-Length; send the file's size"
            )
        length = _length(told) if told is not None else None
        content_sha = headers.get("x-amz-content-sha256", "").lower()
        checksums = {
            name: value
            for name in CHECKSUM_HEADERS
            if (value := headers.get(f"x-amz-checksum-{name}")) is not None
        }
        return cls(
            chunked, length, content_sha if _HEX_SHA256.fullmatch(content_sha) else None, checksums
        )

    @property
    def etag(self) -> str:
        """S3's ETag of a single-part object: the md5 of its bytes, quoted."""
        return f'"{self.md5.hexdigest()}"'

    async def decoded(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        source = _dechunk(chunks, self.trailers) if self.chunked else _plain(chunks)
        sums = {name: _Sum(name) for name in CHECKSUM_HEADERS}
        size = 0
        async for piece in source:
            size += len(piece)
            if self.length is not None and size > self.length:
                raise ArtifactCorrupt(
                    f"the body is longer than the {self.length} bytes announced; nothing was "
                    "stored, send the file again"
                )
            self.md5.update(piece)
            for checksum in sums.values():
                checksum.update(piece)
            yield piece
        if self.length is not None and size != self.length:
            raise ArtifactCorrupt(
                f"the body ended after {size} of the {self.length} bytes announced; nothing "
                "was stored, send the file again"
            )
        expected = {**self.checksums, **_trailer_checksums(self.trailers)}
        for name, value in expected.items():
            actual = sums[name].b64()
            if actual is not None and actual != value.strip():
                raise ArtifactCorrupt(
                    f"the body's {name} is {actual}, not the {value.strip()} sent with it; "
                    "nothing was stored, send the file again"
                )


def _length(value: str) -> int:
    if not value.isdigit() or len(value) > 18:
        raise InvalidInput(f"the content length {value[:40]!r} is not a byte count")
    return int(value)


def _trailer_checksums(trailers: Mapping[str, str]) -> dict[str, str]:
    prefix = "x-amz-checksum-"
    return {
        name[len(prefix) :]: value
        for name, value in trailers.items()
        if name.startswith(prefix) and name[len(prefix) :] in CHECKSUM_HEADERS
    }


class _Sum:
    """One checksum S3 knows, for the algorithms the standard library has."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.crc = 0
        self.hash = hashlib.new(name) if name in ("sha256", "sha1") else None

    def update(self, data: bytes) -> None:
        if self.name == "crc32":
            self.crc = zlib.crc32(data, self.crc)
        elif self.hash is not None:
            self.hash.update(data)

    def b64(self) -> str | None:
        """Base64 as S3 writes it; None for an algorithm not checked here (CRC32C,
        CRC64NVME: the length is still checked)."""
        if self.name == "crc32":
            return base64.b64encode(self.crc.to_bytes(4, "big")).decode()
        if self.hash is not None:
            return base64.b64encode(self.hash.digest()).decode()
        return None


async def _plain(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        if chunk:
            yield chunk


async def _dechunk(chunks: AsyncIterable[bytes], trailers: dict[str, str]) -> AsyncIterator[bytes]:
    """The payload of an aws-chunked body, piece by piece; its trailers into `trailers`."""
    buffer = bytearray()
    source = aiter(chunks)

    async def more() -> bool:
        try:
            buffer.extend(await anext(source))
        except StopAsyncIteration:
            return False
        return True

    async def line() -> bytes:
        while (end := buffer.find(b"\r\n")) < 0:
            if len(buffer) > _LINE_MAX:
                raise _broken("a chunk header or trailer line is over 4 KiB")
            if not await more():
                raise _broken("the body ended inside a chunk header")
        text = bytes(buffer[:end])
        del buffer[: end + 2]
        return text

    while True:
        header = await line()
        size_text = header.split(b";", 1)[0].strip()
        if not _SIZE.fullmatch(size_text):
            raise _broken(f"the chunk header {header[:40]!r} does not start with a hex size")
        left = int(size_text, 16)
        if left == 0:
            break
        while left:
            if not buffer and not await more():
                raise _broken("the body ended inside a chunk")
            piece = bytes(buffer[:left])
            del buffer[: len(piece)]
            left -= len(piece)
            yield piece
        if await line() != b"":
            raise _broken("a chunk is longer than its header says")
    while entry := await line():
        name, sep, value = entry.decode("latin-1").partition(":")
        if not sep:
            raise _broken(f"the trailer line {entry[:40]!r} is not 'name:value'")
        trailers[name.strip().lower()] = value.strip()


def _broken(why: str) -> ArtifactCorrupt:
    return ArtifactCorrupt(f"the aws-chunked body is malformed: {why}; nothing was stored")
