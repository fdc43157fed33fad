"""S3 PUT bodies decoded as they stream (server/s3body.py), against botocore's own encoder."""

from __future__ import annotations

import base64
import hashlib
import io
import zlib
from collections.abc import AsyncIterator

import pytest
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum, Sha256Checksum
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import ArtifactCorrupt, InvalidInput
from gpufleet.server.s3body import S3Body


def aws_chunked(data: bytes, chunk_size: int = 4096, sha: bool = False) -> bytes:
    """The body boto3 sends over HTTPS, made by botocore itself."""
    checksum, name = (Sha256Checksum, "sha256") if sha else (Crc32Checksum, "crc32")
    wrapper = AwsChunkedWrapper(
        io.BytesIO(data),
        checksum_cls=checksum,
        checksum_name=f"x-amz-checksum-{name}",
        chunk_size=chunk_size,
    )
    body: bytes = wrapper.read()
    return body


def chunked_headers(data: bytes) -> dict[str, str]:
    return {
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    }


async def pieces(raw: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


async def decode(body: S3Body, raw: bytes, size: int = 1000) -> bytes:
    return b"".join([piece async for piece in body.decoded(pieces(raw, size))])


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=20_000),
    chunk=st.integers(1, 9000),
    split=st.integers(1, 5000),
    sha=st.booleans(),
)
async def test_an_aws_chunked_body_decodes_to_its_bytes_however_it_is_split(
    data: bytes, chunk: int, split: int, sha: bool
) -> None:
    body = S3Body.of(chunked_headers(data))
    assert await decode(body, aws_chunked(data, chunk, sha), split) == data
    assert body.etag == f'"{hashlib.md5(data).hexdigest()}"'
    assert ("x-amz-checksum-sha256" if sha else "x-amz-checksum-crc32") in body.trailers


async def test_a_flipped_byte_fails_the_trailer_checksum() -> None:
    data = b"model weights " * 1000
    raw = bytearray(aws_chunked(data))
    raw[100] ^= 1
    with pytest.raises(ArtifactCorrupt, match="crc32"):
        await decode(S3Body.of(chunked_headers(data)), bytes(raw))


async def test_a_body_shorter_or_longer_than_announced_is_refused() -> None:
    data = b"x" * 5000
    short = S3Body.of({**chunked_headers(data), "x-amz-decoded-content-length": "5001"})
    with pytest.raises(ArtifactCorrupt, match="ended after 5000 of the 5001"):
        await decode(short, aws_chunked(data))
    long = S3Body.of({**chunked_headers(data), "x-amz-decoded-content-length": "4999"})
    with pytest.raises(ArtifactCorrupt, match="longer than the 4999"):
        await decode(long, aws_chunked(data))


@pytest.mark.parametrize(
    "raw",
    [
        b"zz\r\nabc\r\n0\r\n\r\n",  # not hex
        b"3\r\nabcdef\r\n0\r\n\r\n",  # chunk longer than its header
        b"3\r\nab",  # cut inside a chunk
        b"3\r\nabc\r\n0\r\nnot-a-trailer\r\n\r\n",
        b"1" * 5000,  # a header line that never ends
        b"fffffffffffffffffff\r\n",  # a size past any file
    ],
)
async def test_a_malformed_chunked_body_is_refused(raw: bytes) -> None:
    body = S3Body.of({"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "3"})
    with pytest.raises(ArtifactCorrupt):
        await decode(body, raw)


async def test_a_plain_body_is_checked_against_its_crc32_header() -> None:
    data = b"hello world"
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    good = S3Body.of({"content-length": "11", "x-amz-checksum-crc32": crc})
    assert await decode(good, data) == data
    bad = S3Body.of({"content-length": "11", "x-amz-checksum-crc32": "AAAAAA=="})
    with pytest.raises(ArtifactCorrupt, match="crc32"):
        await decode(bad, data)


def test_a_signed_payloads_sha256_is_taken_and_a_streaming_marker_is_not() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert S3Body.of({"x-amz-content-sha256": digest}).sha256 == digest
    assert S3Body.of({"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}).sha256 is None


@pytest.mark.parametrize("length", ["-1", "1e9", "99999999999999999999", "\x00"])
def test_a_length_that_is_not_a_byte_count_is_refused(length: str) -> None:
    with pytest.raises(InvalidInput, match="byte count"):
        S3Body.of({"content-encoding": "aws-chunked", "x-amz-decoded-content-length": length})
    with pytest.raises(InvalidInput):
        S3Body.of({"content-encoding": "aws-chunked"})
