"""`/api/cloud/storage/{bucket}/{key}`: where a SimpleTuner trainer's S3 provider publishes.

PUT stores a file (one request: the offered `publishing_config` says `force_single_part`),
GET and HEAD read one back (GET with `Range`, as boto3 downloads large files in parts).
Authentication is the attempt's upload token alone (services/s3_storage.py); boto3's SigV4
signature is made with that token as its secret, so it proves nothing more and is not read.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Header, Request, Response
from fastapi.routing import APIRoute
from starlette.responses import StreamingResponse

from gpufleet.domain.publishing import STORAGE_PATH
from gpufleet.errors import InvalidInput
from gpufleet.server.deps import Ctx, client_addr
from gpufleet.server.routes import api_router
from gpufleet.server.s3body import S3Body
from gpufleet.server.schemas.base import ErrorOut
from gpufleet.server.services import s3_storage
from gpufleet.server.services.s3_storage import Served, Uploader

router = api_router(tags=["storage"], route_class=APIRoute)  # bodies are objects' bytes
OBJECT = STORAGE_PATH + "/{bucket}/{key:path}"
Token = Annotated[str | None, Header(alias="X-SimpleTuner-Secret")]
UploadToken = Annotated[str | None, Header(alias="X-Upload-Token")]
_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")


class RangeNotSatisfiable(InvalidInput):
    status_code = 416


async def _uploader(
    ctx: Ctx, request: Request, key: str, secret: str | None, token: str | None
) -> Uploader:
    return await s3_storage.authenticate(ctx, key, secret or token, client_addr(request))


OBJECT_BYTES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {}}, "description": "The object."},
    206: {"content": {"application/octet-stream": {}}, "description": "The range asked for."},
    412: {"description": "If-Match names another version of the object"},
    416: {"model": ErrorOut, "description": "The Range is malformed or past the end"},
}


RAW_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put(
    OBJECT,
    response_class=Response,
    responses={200: {"description": "Stored; its md5 in ETag. No body, as S3 answers."}},
    openapi_extra=RAW_BODY,
)
async def put_object(
    ctx: Ctx,
    request: Request,
    bucket: str,
    key: str,
    secret: Token = None,
    token: UploadToken = None,
) -> Response:
    """Store the body as an artifact of the token's attempt, at `output/<key after the job
    id>`; answers the object's ETag (its md5, as S3 does)."""
    who = await _uploader(ctx, request, key, secret, token)
    body = S3Body.of(request.headers)
    await s3_storage.put(
        ctx, who, key, body.decoded(request.stream()), size=body.length, sha256=body.sha256
    )
    # S3's answer: no body. boto3 reads any 200 body of a PutObject as a possible
    # error document, and retries (then fails) on one that is not XML.
    return Response(headers={"ETag": body.etag})


@router.head(OBJECT, response_class=Response, responses={200: {"description": "The headers."}})
async def head_object(
    ctx: Ctx,
    request: Request,
    key: str,
    bucket: str,
    secret: Token = None,
    token: UploadToken = None,
) -> Response:
    who = await _uploader(ctx, request, key, secret, token)
    art = await s3_storage.find(ctx, who, key)
    return Response(headers=_object_headers(Served(art, 0, art.size)))


@router.get(OBJECT, response_class=StreamingResponse, responses=OBJECT_BYTES)
async def get_object(
    ctx: Ctx,
    request: Request,
    key: str,
    bucket: str,
    secret: Token = None,
    token: UploadToken = None,
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_match: Annotated[str | None, Header(alias="If-Match")] = None,
) -> Response:
    who = await _uploader(ctx, request, key, secret, token)
    art = await s3_storage.find(ctx, who, key)
    served = Served(art, *byte_range(range_, art.size))
    if if_match is not None and if_match.strip() not in ("*", served.etag):
        return Response(status_code=412, headers={"ETag": served.etag})
    partial = (served.start, served.end) != (0, art.size)
    return StreamingResponse(
        await s3_storage.read(ctx, served),
        status_code=206 if partial else 200,
        headers=_object_headers(served, partial=partial),
        media_type="application/octet-stream",
    )


def _object_headers(served: Served, *, partial: bool = False) -> dict[str, str]:
    art = served.artifact
    headers = {
        "Content-Length": str(served.end - served.start),
        "ETag": served.etag,
        "Last-Modified": art.created_at.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "Accept-Ranges": "bytes",
        "X-Gpufleet-Sha256": art.sha256,
        "Content-Type": "application/octet-stream",
    }
    if partial:
        headers["Content-Range"] = f"bytes {served.start}-{served.end - 1}/{art.size}"
    return headers


def byte_range(header: str | None, size: int) -> tuple[int, int]:
    """`(start, end)` (end exclusive) of one `Range: bytes=…` over `size` bytes; the whole
    object without one. 416 for a range that is malformed or past the end."""
    if header is None:
        return 0, size
    match = _RANGE.fullmatch(header.strip())
    if not match or match.groups() == ("", ""):
        raise RangeNotSatisfiable(
            f"Range {header[:60]!r} is not one 'bytes=START-END' range; ask for one range"
        )
    first, last = match.groups()
    if first == "":  # the last N bytes
        start, end = max(size - int(last), 0), size
    else:
        start = int(first)
        end = size if last == "" else min(int(last) + 1, size)
    if start >= size or start >= end:
        raise RangeNotSatisfiable(
            f"Range {header[:60]!r} is outside the object's {size} bytes; ask for bytes "
            f"0-{max(size - 1, 0)}"
        )
    return start, end
