"""The one exception root of gpufleet, and its tree.

    GpufleetError
    ├── DomainError                 rules of the fleet (domain/, services)
    │   ├── InvalidInput            422: the request is well-formed but says something impossible
    │   │   ├── UnsafeArtifactPath  422: an artifact path that could leave its job's folder
    │   │   ├── ArtifactCorrupt     422: an upload whose size or sha256 is not the announced one
    │   │   └── UnsafeArchive       422: a workdir archive that could write outside its folder
    │   ├── NotFound                404: the named worker, job, config or key does not exist
    │   ├── Conflict                409: the thing exists but is in a state that forbids this
    │   │   └── NotHolder           409: a worker reported on an attempt it no longer holds
    │   ├── Unauthenticated         401: no credentials, or credentials we do not recognise
    │   ├── Forbidden               403: valid credentials without the needed permission
    │   ├── PayloadTooLarge         413: the body is over the limit
    │   ├── TooManyRequests         429: too many failed authentications from one address
    │   └── IdentityProviderDown    502: the single sign-on provider did not answer as it should
    ├── StoreError                  the database failed underneath us
    │   └── ArtifactStoreError      the artifact store (data folder or bucket) failed
    ├── ConfigurationError          settings that cannot work (bad URL, unreadable data dir)
    ├── AgentError                  the worker agent cannot go on (see gpufleet.worker)
    ├── ProviderError               a pool's provider could not launch or stop a machine
    ├── LoopDied                    a supervised background loop died (gpufleet.supervisor)
    └── ClientError                 the client (gpufleet.client, the CLI's too) cannot talk to
        │                           the orchestrator (client/http.py)
        └── ConnectionFailed        the request or its answer was lost on the way, or a 502,
                                    503 or 504: the same request may be sent again

The operator CLI turns an HTTP error answer back into the DomainError of its status code.

Every message says what happened and what to do next, in one sentence. The message is in the
API's terms (it may name an endpoint); where the next step reads differently elsewhere, the
error also carries it in the web UI's terms (a button, a page) and the CLI's (a command), as
`detail_for` in the answer, which the UI and the CLI show instead.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Root of every error gpufleet raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DomainError(GpufleetError):
    status_code = 400

    def __init__(self, message: str, *, ui: str | None = None, cli: str | None = None) -> None:
        super().__init__(message)
        self.detail_for = {k: v for k, v in (("ui", ui), ("cli", cli)) if v is not None}


class InvalidInput(DomainError):
    status_code = 422


class UnsafeArtifactPath(InvalidInput):
    """An artifact path that is absolute, climbs with `..`, or cannot be stored as a key."""


class ArtifactCorrupt(InvalidInput):
    """The uploaded bytes are not the ones announced; nothing was stored."""


class UnsafeArchive(InvalidInput):
    """A workdir archive with a path or link leading out, a device file, a hostile name, or
    more bytes unpacked than it carries (artifacts/workdir_archive.py)."""


class NotFound(DomainError):
    status_code = 404


class Conflict(DomainError):
    status_code = 409


class NotHolder(Conflict):
    """A worker spoke about an attempt that is no longer its own (it was fenced off)."""


class Unauthenticated(DomainError):
    status_code = 401


class Forbidden(DomainError):
    status_code = 403


class PayloadTooLarge(DomainError):
    status_code = 413


class TooManyRequests(DomainError):
    status_code = 429

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class IdentityProviderDown(DomainError):
    status_code = 502


class StoreError(GpufleetError):
    """The database failed; the operation was rolled back."""


class WriteConflict(StoreError):
    """PostgreSQL aborted the transaction (deadlock or serialization failure); retry it."""


class ArtifactStoreError(StoreError):
    """The artifact store failed; nothing was stored or deleted by the failed call."""


class ConfigurationError(GpufleetError):
    """Settings that cannot work; the message names the setting to change."""


class AgentError(GpufleetError):
    """The worker agent cannot go on; the message says what the operator should check."""


class ProviderError(GpufleetError):
    """A pool's provider failed; the message says what, `stderr` what it printed."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


class LoopDied(GpufleetError):
    """A background loop raised or returned; the process stops rather than run half-dead."""


class ClientError(GpufleetError):
    """The orchestrator is unreachable or failed; the message says what to check."""


class ConnectionFailed(ClientError):
    """The request or its answer was lost on the way (no connection, a timeout, a dropped
    answer), or the orchestrator was not available (502, 503, 504): sending the same request
    again may succeed (a submit, with the same idempotency key)."""
