"""What can go wrong between the agent and the orchestrator, as the agent sees it.

    AgentError (gpufleet.errors)
    ├── Unreachable         no answer: refused, timed out, broken stream, 5xx; retried with
    │                       backoff once the agent has registered, fatal before that
    ├── TlsFailure          the orchestrator's certificate was not trusted; fatal
    ├── InvalidToken        401: the token is wrong or was rotated; fatal
    ├── Fenced              409: the worker no longer holds the job's attempt; stop the job
    └── Rejected            any other 4xx: the orchestrator refused the request as written

Messages are the troubleshooting lines of the worker orchestration guide, one sentence each.
"""

from __future__ import annotations

from gpufleet.errors import AgentError

CONNECTION_REFUSED = (
    "Connection refused: check the orchestrator URL and port, firewall rules, and that the "
    "orchestrator runs with --host 0.0.0.0"
)
INVALID_TOKEN = (
    "Invalid token: it may have been rotated — request a new one; check for whitespace in the "
    "token string"
)
TLS_FAILED = (
    "SSL certificate verify failed: pass --ca-cert FILE with the orchestrator's CA certificate "
    "(or add it to the system trust store), or --ssl-no-verify for self-signed certs "
    "(development only)"
)


class Unreachable(AgentError):
    """The orchestrator did not answer; worth retrying once we know the URL is right."""


class TlsFailure(AgentError):
    pass


class InvalidToken(AgentError):
    pass


class Fenced(AgentError):
    """A 409: the orchestrator gave the job's attempt to someone else, or ended it."""


class Rejected(AgentError):
    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code
