"""The agent's HTTP side of docs/protocol.md: one method per endpoint, errors translated.

Every httpx error and every non-2xx answer leaves this module as one of the exceptions of
`gpufleet.worker.errors`, so the agent decides on meaning (retry, stop the job, give up), never
on status codes or socket errors.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from gpufleet import __version__
from gpufleet.errors import AgentError
from gpufleet.worker.errors import (
    CONNECTION_REFUSED,
    INVALID_TOKEN,
    TLS_FAILED,
    Fenced,
    InvalidToken,
    Rejected,
    TlsFailure,
    Unreachable,
)
from gpufleet.worker.settings import AgentSettings

log = logging.getLogger(__name__)

Json = dict[str, Any]


class OrchestratorClient:
    def __init__(
        self, settings: AgentSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._url = settings.orchestrator_url
        self._stream_read_timeout = settings.stream_read_timeout
        self._http = httpx.AsyncClient(
            base_url=settings.orchestrator_url,
            headers={
                "X-Worker-Token": settings.worker_token,
                "User-Agent": f"gpufleet-worker/{__version__}",
            },
            verify=settings.tls_verify(),
            timeout=httpx.Timeout(settings.request_timeout),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def register(self, body: Json) -> Json:
        return await self._post("/api/workers/register", body)

    async def heartbeat(self, body: Json) -> Json:
        return await self._post("/api/workers/heartbeat", body)

    async def job_status(self, job_id: str, body: Json) -> Json:
        return await self._post(f"/api/workers/job/{job_id}/status", body)

    async def job_logs(self, job_id: str, body: Json) -> Json:
        return await self._post(f"/api/workers/job/{job_id}/logs", body)

    async def disconnect(self, worker_id: str) -> Json:
        return await self._post("/api/workers/disconnect", {"worker_id": worker_id})

    async def stream(self, worker_id: str) -> AsyncIterator[Json]:
        """The worker's event stream: one dict per `data:` line, until the server closes it."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=self._stream_read_timeout)
        try:
            async with aconnect_sse(
                self._http,
                "GET",
                "/api/workers/stream",
                params={"worker_id": worker_id},
                timeout=timeout,
            ) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise _error_for(source.response)
                async for event in source.aiter_sse():
                    if not event.data:
                        continue
                    try:
                        payload = json.loads(event.data)
                    except ValueError:
                        log.warning("ignoring a stream event that is not JSON: %.200s", event.data)
                        continue
                    if isinstance(payload, dict):
                        yield payload
        except httpx.HTTPError as exc:
            raise translate(exc, self._url) from exc

    async def _post(self, path: str, body: Json) -> Json:
        try:
            response = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise translate(exc, self._url) from exc
        if response.status_code >= 400:
            raise _error_for(response)
        try:
            answer = response.json()
        except ValueError:
            return {}
        return answer if isinstance(answer, dict) else {}


def translate(exc: httpx.HTTPError, url: str) -> AgentError:
    """The agent's reading of a transport failure."""
    causes = list(_causes(exc))
    if any(isinstance(cause, ssl.SSLCertVerificationError) for cause in causes) or (
        "CERTIFICATE_VERIFY_FAILED" in " ".join(map(str, causes))
    ):
        return TlsFailure(TLS_FAILED)
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return Unreachable(f"{CONNECTION_REFUSED} (tried {url})")
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return Unreachable(
            f"Cannot resolve the host of {url}: check the spelling of --orchestrator-url"
        )
    if any(isinstance(cause, ssl.SSLError) for cause in causes):
        return TlsFailure(
            f"TLS handshake with {url} failed ({exc}): check that the URL's "
            "scheme (http or https) matches how the orchestrator serves"
        )
    if isinstance(exc, httpx.TimeoutException):
        return Unreachable(f"The orchestrator at {url} did not answer in time: check the network")
    return Unreachable(f"Lost the connection to the orchestrator at {url} ({exc or type(exc)})")


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)


def _error_for(response: httpx.Response) -> AgentError:
    detail = _detail(response)
    code = response.status_code
    if code == 401:
        return InvalidToken(INVALID_TOKEN)
    if code == 409:
        return Fenced(f"the orchestrator says this worker no longer holds the job: {detail}")
    if code >= 500 or code in (408, 429):
        return Unreachable(f"the orchestrator answered {code}: {detail}")
    return Rejected(
        f"the orchestrator refused {response.request.url.path} ({code}): {detail}", code
    )


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:300]
