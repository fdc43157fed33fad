"""The agent's client facing several orchestrator URLs: it moves on from one it cannot reach
and sticks with one that answers. Replicas are fakes behind an httpx transport, one per host."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gpufleet.worker.client import OrchestratorClient, translate
from gpufleet.worker.errors import TLS_FAILED, Fenced, InvalidToken, TlsFailure, Unreachable
from gpufleet.worker.settings import AgentSettings

A, B, C = "http://a.test", "http://b.test", "http://c.test"
SWITCH = "orchestrator {} unreachable; trying {}"


class BrokenStream(httpx.AsyncByteStream):
    """One event, then the connection is reset."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"type": "ping"}\n\n'
        raise httpx.ReadError("[Errno 104] Connection reset by peer")


class Replicas:
    """Fake orchestrator replicas by host: each answers 200 unless told to fail."""

    def __init__(self) -> None:
        self.refusing: set[str] = set()
        self.answers: dict[str, int] = {}  # host -> status code to answer with
        self.hung: dict[str, asyncio.Barrier] = {}  # host -> fails once all parties wait
        self.hits: list[str] = []  # "host path", in order

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.hits.append(f"{host} {request.url.path}")
        if (barrier := self.hung.get(host)) is not None:
            await barrier.wait()
            self.hung.pop(host, None)
            self.refusing.add(host)
        if host in self.refusing:
            raise httpx.ConnectError("All connection attempts failed", request=request) from (
                ConnectionRefusedError(111, "Connection refused")
            )
        code = self.answers.get(host, 200)
        if request.url.path == "/api/workers/stream" and code == 200:
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=BrokenStream()
            )
        return httpx.Response(code, json={"ok": True, "host": host, "detail": "fake"})

    def client(self, urls: str, tmp_path: Path) -> OrchestratorClient:
        settings = AgentSettings(orchestrator_url=urls, worker_token="wt_test", work_dir=tmp_path)
        return OrchestratorClient(settings, transport=httpx.MockTransport(self.handle))


@pytest.fixture
def replicas() -> Replicas:
    return Replicas()


def switches(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unreachable; trying" in r.getMessage()]


async def test_a_dead_first_url_is_skipped_and_the_next_one_is_kept(replicas, tmp_path, caplog):
    replicas.refusing.add("a.test")
    client = replicas.client(f"{A},{B}", tmp_path)

    assert (await client.heartbeat({}))["host"] == "b.test"
    assert (await client.heartbeat({}))["host"] == "b.test"
    assert client.url == B
    assert replicas.hits == [
        "a.test /api/workers/heartbeat",
        "b.test /api/workers/heartbeat",
        "b.test /api/workers/heartbeat",
    ]
    assert switches(caplog) == [SWITCH.format(A, B)]
    await client.aclose()


@pytest.mark.parametrize("code", [502, 503, 504])
async def test_a_proxys_gateway_error_moves_on_to_the_next_url(replicas, tmp_path, code):
    replicas.answers["a.test"] = code
    client = replicas.client(f"{A},{B}", tmp_path)

    assert (await client.register({}))["host"] == "b.test"
    assert client.url == B
    await client.aclose()


@pytest.mark.parametrize(
    ("code", "error"), [(500, Unreachable), (401, InvalidToken), (409, Fenced)]
)
async def test_an_answer_from_a_reachable_orchestrator_does_not_move_on(
    replicas, tmp_path, code, error
):
    replicas.answers["a.test"] = code
    client = replicas.client(f"{A},{B}", tmp_path)

    with pytest.raises(error):
        await client.job_status("j_1", {"status": "running"})
    assert client.url == A
    assert replicas.hits == ["a.test /api/workers/job/j_1/status"]
    await client.aclose()


async def test_when_every_url_is_down_each_is_tried_once_and_the_last_error_raised(
    replicas, tmp_path, caplog
):
    replicas.refusing.update({"a.test", "b.test"})
    client = replicas.client(f"{A},{B}", tmp_path)

    with pytest.raises(Unreachable, match=r"Connection refused.*\(tried http://b.test\)"):
        await client.register({})
    assert replicas.hits == ["a.test /api/workers/register", "b.test /api/workers/register"]
    # No promise of a next URL that is not tried: the agent decides when to try again.
    assert switches(caplog) == [SWITCH.format(A, B)]

    replicas.refusing.discard("a.test")
    assert (await client.register({}))["host"] == "a.test"  # round robin: back to the first
    await client.aclose()


async def test_the_urls_are_tried_round_robin(replicas, tmp_path, caplog):
    client = replicas.client(f"{A},{B},{C}", tmp_path)
    for dead, answering in [("a.test", "b.test"), ("b.test", "c.test"), ("c.test", "a.test")]:
        replicas.refusing = {dead}
        assert (await client.heartbeat({}))["host"] == answering
    assert switches(caplog) == [SWITCH.format(A, B), SWITCH.format(B, C), SWITCH.format(C, A)]
    await client.aclose()


async def test_one_url_behaves_as_before_without_switching(replicas, tmp_path, caplog):
    replicas.refusing.add("a.test")
    client = replicas.client(A, tmp_path)

    with pytest.raises(Unreachable, match=r"^Connection refused: .*\(tried http://a.test\)$"):
        await client.register({})
    assert replicas.hits == ["a.test /api/workers/register"]
    assert switches(caplog) == []
    await client.aclose()


async def test_requests_failing_together_on_one_url_move_on_once(replicas, tmp_path, caplog):
    replicas.hung["a.test"] = asyncio.Barrier(3)  # all three wait on the dying replica
    client = replicas.client(f"{A},{B}", tmp_path)

    answers = await asyncio.gather(*(client.heartbeat({}) for _ in range(3)))

    assert [answer["host"] for answer in answers] == ["b.test"] * 3
    assert client.url == B  # not bounced back to the dead one by the later failures
    assert switches(caplog) == [SWITCH.format(A, B)]
    await client.aclose()


async def test_a_broken_event_stream_leaves_the_next_url_for_the_reconnect(
    replicas, tmp_path, caplog
):
    client = replicas.client(f"{A},{B}", tmp_path)
    events = []

    with pytest.raises(Unreachable, match="Lost the connection to the orchestrator at http://a"):
        async for event in client.stream("w_1"):
            events.append(event)
    assert events == [{"type": "ping"}]
    assert client.url == B
    assert switches(caplog) == [SWITCH.format(A, B)]
    assert (await client.register({}))["host"] == "b.test"
    await client.aclose()


async def test_a_gateway_error_opening_the_stream_moves_on(replicas, tmp_path):
    replicas.answers["a.test"] = 503
    client = replicas.client(f"{A},{B}", tmp_path)

    with pytest.raises(Unreachable, match="answered 503"):
        async for _ in client.stream("w_1"):
            pass
    assert client.url == B
    await client.aclose()


# ---- how a failure reads: a replica dying under TLS is a lost connection, not a TLS error ----


def chained(outer: httpx.HTTPError, *inner: BaseException) -> httpx.HTTPError:
    """`outer`, with `inner` as its chain of contexts, innermost last (as asyncio leaves it)."""
    current: BaseException = outer
    for cause in inner:
        current.__context__ = cause
        current = cause
    return outer


def test_a_tls_link_reset_mid_stream_reads_as_a_lost_connection():
    reset = chained(
        httpx.ReadError(""),
        ssl.SSLWantReadError("The operation did not complete (read)"),
        ConnectionResetError(104, "Connection reset by peer"),
    )
    error = translate(reset, A)
    assert isinstance(error, Unreachable)
    assert error.message.startswith("Lost the connection to the orchestrator at http://a.test")


def test_a_tls_handshake_cut_by_a_dying_replica_reads_as_a_lost_connection():
    cut = chained(httpx.ConnectError(""), ssl.SSLEOFError("EOF occurred in violation of protocol"))
    assert isinstance(translate(cut, A), Unreachable)


def test_a_handshake_failure_still_says_to_check_the_scheme():
    mismatch = chained(httpx.ConnectError(""), ssl.SSLError("[SSL] record layer failure"))
    error = translate(mismatch, A)
    assert isinstance(error, TlsFailure)
    assert "check that the URL's scheme (http or https) matches" in error.message


def test_an_untrusted_certificate_still_reads_as_a_tls_failure():
    untrusted = chained(httpx.ConnectError(""), ssl.SSLCertVerificationError("self-signed"))
    assert translate(untrusted, A).message == TLS_FAILED
