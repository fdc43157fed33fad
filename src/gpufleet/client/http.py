"""The orchestrator's API over HTTP, for the Python client and the CLI alike: one session,
the key on every request, one-line errors.

Every failure leaves this module as a `GpufleetError`: an HTTP error answer becomes the
`DomainError` of its status code with the server's own `detail` (so the CLI prints exactly
what the API would have told a script); a request or answer lost on the way, or a 502, 503 or
504, is a `ConnectionFailed`, which a caller may send again (a submit, with its idempotency
key: gpufleet/client/jobs.py).
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
from httpx_sse import connect_sse

from gpufleet.client_tls import verify_for
from gpufleet.errors import (
    ClientError,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
)

DEFAULT_URL = "http://127.0.0.1:8001"
DEFAULT_DATA_DIR = Path(".gpufleet")
_UNAVAILABLE = {502, 503, 504}  # a proxy, or the orchestrator, says: not now
_BY_STATUS: dict[int, type[DomainError]] = {
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
}


class ApiClient:
    """A synchronous client of the orchestrator's API: its verbs, by path. `transport`: an
    httpx transport of the caller's (a test's injected fault); None: httpx's own."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        data_dir: Path = DEFAULT_DATA_DIR,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"--url {url!r} is not an http(s) URL; write e.g. {DEFAULT_URL}"
            )
        self.url = url
        self.data_dir = data_dir
        self.verify = verify
        self._http = httpx.Client(
            base_url=url,
            timeout=timeout,
            verify=verify_for([url], verify),
            transport=transport,
            headers={
                "Accept": "application/json",
                # none for `gpufleet login`'s calls before it has a session
                **({"Authorization": f"Bearer {api_key}"} if api_key else {}),
            },
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self._request("GET", path, params=_drop_none(params))

    def post(self, path: str, body: Any = None) -> Any:
        return self._request("POST", path, json=body)

    def post_form(self, path: str, fields: dict[str, str]) -> Any:
        """POST an urlencoded form (single sign-on's token endpoints, as OAuth's own)."""
        return self._request("POST", path, data=fields)

    def put(self, path: str, body: Any = None, **params: Any) -> Any:
        return self._request("PUT", path, json=body, params=_drop_none(params))

    def patch(self, path: str, body: Any) -> Any:
        return self._request("PATCH", path, json=body)

    def post_query(self, path: str, **params: Any) -> Any:
        """A POST whose arguments are the query's (`?reason=…`, `?days=…`), not a body."""
        return self._request("POST", path, params=_drop_none(params))

    def delete(self, path: str) -> Any:
        return self._request("DELETE", path)

    def upload(self, path: str, chunks: Iterable[bytes], size: int) -> Any:
        """PUT the `size` bytes of `chunks`, streamed, with their Content-Length."""
        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        timeout = httpx.Timeout(30.0, write=300.0, read=300.0)
        return self._request("PUT", path, content=chunks, headers=headers, timeout=timeout)

    @contextlib.contextmanager
    def fetch(self, path: str, **params: Any) -> Iterator[httpx.Response]:
        """A file's answer, its body not read yet. A redirect (to a presigned URL of object
        storage) is followed once, by a client of its own: the API key is for the
        orchestrator only, never sent to a bucket."""
        timeout = httpx.Timeout(30.0, read=300.0)
        with self._translated(), contextlib.ExitStack() as stack:
            request = self._http.build_request(
                "GET", path, params=_drop_none(params), timeout=timeout
            )
            response = self._http.send(request, stream=True)
            stack.callback(response.close)
            if response.is_redirect and "location" in response.headers:
                target = response.url.join(response.headers["location"])
                if target.scheme not in ("http", "https"):
                    raise ClientError(
                        f"the orchestrator at {self.url} redirected the download to a "
                        f"{target.scheme}: URL, which is not followed; check that --url / "
                        "GPUFLEET_URL is your orchestrator"
                    )
                bare = stack.enter_context(
                    httpx.Client(timeout=timeout, verify=self._verify_for(target))
                )
                response = bare.send(bare.build_request("GET", target), stream=True)
                stack.callback(response.close)
                if response.is_error:
                    raise ClientError(
                        f"the artifact store at {target.host} refused the download link the "
                        f"orchestrator gave (HTTP {response.status_code}); run the command "
                        "again for a fresh link, and if it fails again, check the "
                        "orchestrator's --artifacts store"
                    )
            if response.is_error:
                response.read()
                self._raise_for(response)
            yield response

    def _verify_for(self, target: httpx.URL) -> ssl.SSLContext | bool:
        """A CA file given for the orchestrator does not vouch for a bucket elsewhere."""
        base = self._http.base_url
        if self.verify is False or (target.scheme, target.host, target.port) == (
            base.scheme,
            base.host,
            base.port,
        ):
            return self.verify
        return True

    def events(self, path: str, **params: Any) -> Iterator[tuple[str, Any]]:
        """Server-Sent Events of `path` as (event, data) pairs, until the server ends them."""
        timeout = httpx.Timeout(10.0, read=60.0)  # the server pings every 15 s
        with (
            self._translated(),
            connect_sse(
                self._http, "GET", path, params=_drop_none(params), timeout=timeout
            ) as source,
        ):
            if source.response.is_error:
                source.response.read()
                self._raise_for(source.response)
            for sse in source.iter_sse():
                yield sse.event, sse.json() if sse.data else None

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        with self._translated():
            response = self._http.request(method, path, **kwargs)
        if response.is_error:
            self._raise_for(response)
        try:
            return response.json()
        except ValueError:
            raise ClientError(
                f"{self.url} answered {method} {path} with something other than JSON: "
                "is --url / GPUFLEET_URL a gpufleet orchestrator?"
            ) from None

    def _translated(self) -> _Translated:
        return _Translated(self.url)

    def _raise_for(self, response: httpx.Response) -> None:
        detail = _detail(response)
        status = response.status_code
        if status == 401:
            raise Unauthenticated(
                f"the orchestrator at {self.url} refused the API key: pass --api-key or set "
                f"GPUFLEET_API_KEY (the admin key is in {self.data_dir / 'admin.token'})"
            )
        if status in _UNAVAILABLE:
            raise ConnectionFailed(
                f"the orchestrator at {self.url} failed (HTTP {status}): {detail}; see its log"
            )
        if status >= 500:
            raise ClientError(
                f"the orchestrator at {self.url} failed (HTTP {status}): {detail}; see its log"
            )
        raise _BY_STATUS.get(status, DomainError)(detail)


class _Translated:
    """Turns transport failures inside the `with` block into one-line `ClientError`s."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, httpx.HTTPError) and _is_tls_failure(exc):
            raise ClientError(
                f"TLS with the orchestrator at {self.url} failed ({exc}): trust its "
                "certificate with --ca-cert / GPUFLEET_CA_CERT (or, for development only, "
                "--ssl-no-verify), and check that the URL's scheme matches how it serves"
            ) from exc
        if isinstance(exc, httpx.ConnectError):
            raise ConnectionFailed(
                f"cannot reach the orchestrator at {self.url}: is it running? "
                "(`gpufleet server`, or set --url / GPUFLEET_URL)"
            ) from exc
        if isinstance(exc, httpx.TimeoutException):
            raise ConnectionFailed(
                f"the orchestrator at {self.url} did not answer in time: is it overloaded, "
                "or is --url / GPUFLEET_URL pointing elsewhere?"
            ) from exc
        if isinstance(exc, httpx.HTTPError):
            failed = ConnectionFailed if isinstance(exc, httpx.TransportError) else ClientError
            raise failed(
                f"the connection to the orchestrator at {self.url} failed ({exc or type(exc)}): "
                "check the URL's scheme (http or https) and try again"
            ) from exc


def part(value: str) -> str:
    """One path segment of a URL: an id or a name, quoted so it cannot reach elsewhere."""
    return quote(value, safe="")


def _is_tls_failure(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _detail(response: httpx.Response) -> str:
    """The answer's `detail`, or its `detail_for.cli`: the same in the CLI's terms."""
    try:
        body = response.json()
        detail = (body.get("detail_for") or {}).get("cli") or body.get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    if detail:
        return json.dumps(detail)
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def _drop_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None and v != [] and v != ()}
