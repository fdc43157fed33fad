"""The agent's HTTP side of docs/protocol.md: one method per endpoint, errors translated.

Every httpx error and every non-2xx answer leaves this module as one of the exceptions of
`gpufleet.worker.errors`, so the agent decides on meaning (retry, stop the job, give up), never
on status codes or socket errors.

Failover: `--orchestrator-url` may list several replicas that share one database, so any of
them can serve any request. The client talks to one at a time and sticks with it while it
answers. When it cannot be reached (refused, reset, timed out, or a proxy's 502/503/504), the
client moves on to the next URL, round robin: a request tries each URL once before it gives
up, and a broken event stream leaves the next URL for the agent's reconnect.

Every call about a job carries, beside the worker token, that attempt's own token
(`X-Attempt-Token`, the offer's `upload_token`, remembered by `bind_attempt`): the
orchestrator takes a write into a job only with its attempt's token (docs/security.md).

Text the worker sends comes from its jobs (output lines, progress metrics, error tails) and
may hold NUL characters, which the orchestrator refuses in anything it stores: every body is
sent through `encode`, here and nowhere else, made what the orchestrator takes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from gpufleet import __version__, protocol
from gpufleet.client_tls import verify_for
from gpufleet.domain import jsonpolicy
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


ATTEMPT_TOKEN_HEADER = "X-Attempt-Token"

# What a proxy answers for a replica it cannot reach: try another one.
GATEWAY_ERRORS = frozenset({502, 503, 504})


class OrchestratorClient:
    def __init__(
        self, settings: AgentSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._urls = settings.orchestrator_urls
        self._current = 0
        self._stream_read_timeout = settings.stream_read_timeout
        self._verify = settings.tls_verify()
        self._transport = transport
        self._plain: httpx.AsyncClient | None = None
        self._attempt_tokens: dict[str, str] = {}  # job id → its running attempt's token
        # One client for every URL: the TLS settings (--ca-cert, --ssl-no-verify) serve them all.
        self._http = httpx.AsyncClient(
            headers={
                "X-Worker-Token": settings.worker_token,
                "User-Agent": f"gpufleet-worker/{__version__}",
            },
            verify=verify_for(self._urls, self._verify),
            timeout=httpx.Timeout(settings.request_timeout),
            transport=transport,
        )

    @property
    def url(self) -> str:
        """The orchestrator URL in use: the first, until it stops answering."""
        return self._urls[self._current]

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._plain is not None:
            await self._plain.aclose()

    def _plain_client(self) -> httpx.AsyncClient:
        """For presigned store URLs: the same TLS trust, never the worker's token."""
        if self._plain is None:
            self._plain = httpx.AsyncClient(
                headers={"User-Agent": f"gpufleet-worker/{__version__}"},
                verify=self._verify,
                timeout=self._http.timeout,
                transport=self._transport,
            )
        return self._plain

    def bind_attempt(self, job_id: str, token: str | None) -> None:
        """Send `token` with every call about `job_id` until `unbind_attempt`."""
        if token:
            self._attempt_tokens[job_id] = token

    def unbind_attempt(self, job_id: str) -> None:
        self._attempt_tokens.pop(job_id, None)

    def _job_headers(self, path: str) -> dict[str, str]:
        """The attempt token for a call about a job (`/api/workers/job/<id>/…`), if bound."""
        prefix = f"{protocol.WORKER_API}/job/"
        if not path.startswith(prefix):
            return {}
        token = self._attempt_tokens.get(path[len(prefix) :].split("/", 1)[0])
        return {ATTEMPT_TOKEN_HEADER: token} if token else {}

    async def register(self, body: Json) -> Json:
        return await self._post(protocol.REGISTER, body)

    async def heartbeat(self, body: Json) -> Json:
        return await self._post(protocol.HEARTBEAT, body)

    async def job_status(self, job_id: str, body: Json) -> Json:
        return await self._post(protocol.job_status_path(job_id), body)

    async def job_logs(self, job_id: str, body: Json) -> Json:
        return await self._post(protocol.job_logs_path(job_id), body)

    async def disconnect(self, worker_id: str) -> Json:
        return await self._post(protocol.DISCONNECT, {"worker_id": worker_id})

    # -- artifacts and checkpoints (docs/artifacts.md, "Worker API") ---------------------

    async def announce_upload(self, job_id: str, body: Json) -> Json:
        return await self._post(protocol.job_upload_path(job_id), body)

    async def complete_upload(self, job_id: str, upload_id: str) -> Json:
        return await self._post(protocol.job_upload_complete_path(job_id, upload_id), {})

    async def commit_checkpoint(self, job_id: str, body: Json) -> Json:
        return await self._post(protocol.job_checkpoints_path(job_id), body)

    async def fetch_checkpoint(self, job_id: str, checkpoint_id: str, attempt_id: str) -> Json:
        path = protocol.job_checkpoint_path(job_id, checkpoint_id)
        response = await self._send("GET", path, {}, params={"attempt_id": attempt_id})
        return _json_object(response)

    async def fetch_secrets(self, job_id: str, attempt_id: str) -> Json:
        """The values of the secrets the job's env refers to, for this attempt: kept in
        memory for its process's environment only."""
        path = protocol.job_secrets_path(job_id)
        response = await self._send("GET", path, {}, params={"attempt_id": attempt_id})
        return _json_object(response)

    async def put_file(
        self, url: str, headers: dict[str, str], body: AsyncIterator[bytes], size: int
    ) -> Json:
        """PUT `size` bytes from `body` to `url`: absolute (presigned: no worker token), or
        a path on the orchestrator. Content-Length is set: object stores refuse chunked PUTs."""
        sent = {**headers, "Content-Length": str(size)}
        if _absolute(url):
            response = await self._external("PUT", url, sent, content=body)
        else:
            response = await self._send("PUT", url, sent, content=body)
        return _json_object(response)

    @contextlib.asynccontextmanager
    async def download(self, url: str, headers: dict[str, str]) -> AsyncIterator[httpx.Response]:
        """An open GET of `url` (absolute: presigned, no worker token; else the orchestrator's
        path), its status checked; read it with `aiter_bytes`."""
        if _absolute(url):
            client, target = self._plain_client(), url
        else:
            client, target = self._http, f"{self.url}{url}"
            headers = {**headers, **self._job_headers(url)}
        try:
            async with client.stream("GET", target, headers=headers) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise _error_for(response)
                yield response
        except httpx.HTTPError as exc:
            raise translate(exc, target) from exc

    async def stream(self, worker_id: str) -> AsyncIterator[Json]:
        """The worker's event stream: one dict per `data:` line, until the server closes it.

        A stream that breaks fails over, so that the agent's reconnect tries the next URL.
        """
        url = self.url
        timeout = httpx.Timeout(self._http.timeout.connect, read=self._stream_read_timeout)
        try:
            async with aconnect_sse(
                self._http,
                "GET",
                f"{url}{protocol.STREAM}",
                params={"worker_id": worker_id},
                timeout=timeout,
            ) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    if source.response.status_code in GATEWAY_ERRORS:
                        self._fail_over(url)
                    raise _error_for(source.response)
                async for event in source.aiter_sse():
                    if not event.data:
                        continue
                    try:
                        payload = json.loads(event.data)
                    except (ValueError, RecursionError):
                        log.warning("ignoring a stream event that is not JSON: %.200s", event.data)
                        continue
                    if isinstance(payload, dict):
                        yield payload
        except httpx.HTTPError as exc:
            error = translate(exc, url)
            if isinstance(error, Unreachable):
                self._fail_over(url)
            raise error from exc

    async def _post(self, path: str, body: Json) -> Json:
        content = encode(body)
        tries_left = len(self._urls)
        while True:
            tries_left -= 1
            url = self.url
            try:
                response = await self._http.post(
                    f"{url}{path}",
                    content=content,
                    headers={"Content-Type": "application/json", **self._job_headers(path)},
                )
            except httpx.HTTPError as exc:
                error = translate(exc, url)
                if tries_left and isinstance(error, Unreachable):
                    self._fail_over(url)
                    continue
                raise error from exc
            if tries_left and response.status_code in GATEWAY_ERRORS:
                self._fail_over(url)
                continue
            if response.status_code >= 400:
                raise _error_for(response)
            try:
                answer = response.json()
            except ValueError:
                return {}
            return answer if isinstance(answer, dict) else {}

    async def _send(
        self, method: str, path: str, headers: dict[str, str], **kwargs: Any
    ) -> httpx.Response:
        """One try at the orchestrator in use, errors translated. A failure moves on to the
        next URL for the caller's retry: a streamed body cannot be replayed here."""
        url = self.url
        headers = {**headers, **self._job_headers(path)}
        try:
            response = await self._http.request(method, f"{url}{path}", headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            error = translate(exc, url)
            if isinstance(error, Unreachable):
                self._fail_over(url)
            raise error from exc
        if response.status_code in GATEWAY_ERRORS:
            self._fail_over(url)
        if response.status_code >= 400:
            raise _error_for(response)
        return response

    async def _external(
        self, method: str, url: str, headers: dict[str, str], **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self._plain_client().request(method, url, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise translate(exc, url) from exc
        if response.status_code >= 400:
            raise _error_for(response)
        return response

    def _fail_over(self, url: str) -> None:
        """Move on from `url` to the next one, unless a concurrent request already did."""
        if len(self._urls) < 2 or url != self.url:
            return
        self._current = (self._current + 1) % len(self._urls)
        log.warning("orchestrator %s unreachable; trying %s", url, self.url)


def encode(body: Json) -> bytes:
    """`body` as JSON the orchestrator's input policy takes (`domain.jsonpolicy`): a lone
    surrogate as U+FFFD, NaN as null, an integer past 64 bits as text, anything nested too
    deep as null, a NUL as U+FFFD. Job output and progress reach the
    orchestrator whatever the job wrote; `Rejected` only for what is not JSON at all."""
    try:
        text = json.dumps(
            jsonpolicy.readable(body), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (ValueError, TypeError, RecursionError) as exc:
        raise Rejected(f"the worker cannot write this report as JSON: {exc!r:.200}", 0) from exc
    return text.encode()


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
    if _failed_handshake(exc, causes):
        return TlsFailure(
            f"TLS handshake with {url} failed ({exc}): check that the URL's "
            "scheme (http or https) matches how the orchestrator serves"
        )
    if isinstance(exc, httpx.TimeoutException):
        return Unreachable(f"The orchestrator at {url} did not answer in time: check the network")
    return Unreachable(f"Lost the connection to the orchestrator at {url} ({exc or type(exc)})")


# Not a TLS problem: the peer went away (an orchestrator or a relay dying resets its links);
# the "want" errors are the normal course of a non-blocking read, left in exception contexts.
_LOST = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
    ssl.SSLWantReadError,
    ssl.SSLWantWriteError,
)


def _failed_handshake(exc: httpx.HTTPError, causes: list[BaseException]) -> bool:
    """Whether TLS itself failed as the connection opened (a scheme or protocol mismatch)."""
    if not isinstance(exc, httpx.ConnectError) or any(isinstance(c, _LOST) for c in causes):
        return False
    return any(isinstance(cause, ssl.SSLError) for cause in causes)


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
    # 501: the orchestrator has no such feature; asking again will not change that.
    if (code >= 500 and code != 501) or code in (408, 429):
        return Unreachable(f"the orchestrator answered {code}: {detail}")
    return Rejected(
        f"the orchestrator refused {response.request.url.path} ({code}): {detail}", code
    )


def _absolute(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _json_object(response: httpx.Response) -> Json:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:300]
