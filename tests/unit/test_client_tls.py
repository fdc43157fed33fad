"""A client that calls plain-http orchestrators loads no CA bundle, and its TLS context
trusts nothing; one that calls an https URL verifies as it was told (#32: certifi's bundle
was a quarter of an operator command's CPU)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import httpx
import pytest
import trustme

from gpufleet.client.http import ApiClient
from gpufleet.client_tls import verify_for


def cas(context: ssl.SSLContext) -> int:
    return context.cert_store_stats()["x509_ca"]


def transport_context(client: httpx.Client) -> ssl.SSLContext:
    context: ssl.SSLContext = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    return context


def test_plain_http_gets_a_context_that_checks_against_no_ca() -> None:
    context = verify_for(["http://127.0.0.1:8001", "HTTP://gpu-box:8001/"], True)
    assert isinstance(context, ssl.SSLContext)
    assert (cas(context), context.verify_mode, context.check_hostname) == (
        0,
        ssl.CERT_REQUIRED,
        True,
    )


@pytest.mark.parametrize("verify", [True, False, "context"])
def test_any_https_url_keeps_what_the_caller_asked(verify: object) -> None:
    asked = ssl.create_default_context() if verify == "context" else verify
    assert verify_for(["http://a:8001", " https://b:8443"], asked) is asked  # type: ignore[arg-type]


def test_the_operator_commands_client_loads_cas_only_for_https() -> None:
    with ApiClient("http://127.0.0.1:1", "key") as plain:
        assert cas(transport_context(plain._http)) == 0
    with ApiClient("https://127.0.0.1:1", "key") as tls:
        assert cas(transport_context(tls._http)) > 0


@pytest.fixture
def tls_server() -> Iterator[str]:
    """A TLS server whose certificate a real CA signed: any client that trusts a CA at all
    could be fooled only by a CA it trusts; this one's is trusted by nobody here."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with conn, server_ctx.wrap_socket(conn, server_side=True):
                pass
        except (OSError, ssl.SSLError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}/"
    listener.close()
    thread.join(timeout=5)


def test_the_context_given_for_plain_http_vouches_for_no_tls_server(tls_server: str) -> None:
    context = verify_for(["http://127.0.0.1:8001"], True)
    with httpx.Client(verify=context) as client, pytest.raises(httpx.ConnectError) as caught:
        client.get(tls_server)
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
