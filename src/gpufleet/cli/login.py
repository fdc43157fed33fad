"""`gpufleet login` and `gpufleet logout`: single sign-on from the command line.

Where the provider offers the device authorization grant (RFC 8628), `login` asks the
orchestrator for a code, the person types it at the provider's page on any device, and the
orchestrator, polled, answers the session once they did. Elsewhere (or with `--loopback`),
`login` signs in at the orchestrator's identity provider in a browser, which comes back to a
loopback address this command listens on (RFC 8252: http://127.0.0.1:PORT/callback, with
PKCE, a state and a nonce). The orchestrator redeems the code with its client secret and the
verifier this command made, and answers a session token good for an hour and the provider's
refresh token, kept in the config folder (client/signins.py) and used by every command given no
API key. `logout` ends the session at the orchestrator and forgets it here.
"""

from __future__ import annotations

import http.server
import secrets
import threading
import time
import webbrowser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import click
from authlib.integrations.httpx_client import OAuth2Client

from gpufleet.cli import output as out
from gpufleet.cli.api import ApiClient, connection_options
from gpufleet.client import signins
from gpufleet.client.connection import resolve_url, verify_option
from gpufleet.errors import ConfigurationError, GpufleetError, Unauthenticated

CALLBACK = "/callback"
DONE_PAGE = (
    b"<!doctype html><title>gpufleet</title><p>Signed in to gpufleet: you may close this "
    b"window and go back to the terminal.</p>"
)


class _Callback(http.server.BaseHTTPRequestHandler):
    """Takes the provider's one redirect back; anything else is a 404."""

    got: dict[str, str]
    arrived: threading.Event

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path != CALLBACK or self.arrived.is_set():
            self.send_error(404)
            return
        query = parse_qs(split.query)
        self.got.update({k: v[0] for k, v in query.items() if v})
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(DONE_PAGE)
        self.arrived.set()

    def log_message(self, format: str, *args: Any) -> None:
        return  # the terminal shows what matters


def _listen() -> tuple[http.server.HTTPServer, dict[str, str], threading.Event]:
    got: dict[str, str] = {}
    arrived = threading.Event()
    handler = type("Handler", (_Callback,), {"got": got, "arrived": arrived})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="login-callback", daemon=True).start()
    return server, got, arrived


@click.command("login")
@connection_options
@click.option("--no-browser", is_flag=True, help="Print the sign-in URL; open no browser.")
@click.option(
    "--loopback",
    is_flag=True,
    help="Sign in through a browser on this machine even where the provider offers the "
    "device flow.",
)
@click.option(
    "--timeout",
    default=300.0,
    type=click.FloatRange(min=1),
    help="Seconds to wait for the sign-in at the provider.",
)
def login(
    url: str | None,
    data_dir: Path,
    ca_cert: Path | None,
    ssl_no_verify: bool,
    no_browser: bool,
    loopback: bool,
    timeout: float,
) -> None:
    """Sign in through the orchestrator's identity provider (single sign-on); commands given
    no API key then use this session. The provider's device flow where it offers one (a code
    to type on any device), else a browser on this machine."""
    verify = verify_option(ca_cert, ssl_no_verify)
    target = resolve_url(url, data_dir)
    with ApiClient(target, "", data_dir=data_dir, verify=verify) as api:
        info = api.get("/api/sso")
        if not info["enabled"]:
            raise ConfigurationError(f"{target} has no single sign-on; use an API key (--api-key)")
        if info.get("device_flow") and not loopback:
            answer = _device(api, info, no_browser, timeout)
        else:
            answer = _loopback(api, info, no_browser, timeout)
    signins.save(target, answer)
    out.echo(f"Signed in to {target} as {answer['user']} (level {answer['level']}).")


def _device(api: ApiClient, info: dict[str, Any], no_browser: bool, timeout: float) -> Any:
    """RFC 8628: the person types a code at the provider, on any device; we poll."""
    start = api.post("/api/sso/device")
    complete = start.get("verification_uri_complete")
    out.echo(
        f"Sign in with {info['provider_name']}: open {start['verification_uri']} and enter the "
        f"code {start['user_code']}" + (f"\n  or open: {complete}" if complete else ""),
        err=True,
    )
    if not no_browser:
        webbrowser.open(complete or start["verification_uri"])
    deadline = time.monotonic() + min(timeout, float(start["expires_in"]))
    while True:
        answer = api.post_form("/api/sso/device/token", {"device_code": start["device_code"]})
        if not answer.get("pending"):
            return answer
        if time.monotonic() > deadline:
            raise Unauthenticated("the code was not entered in time; run `gpufleet login` again")
        time.sleep(max(1, int(start["interval"])))  # the provider's pace (RFC 8628, 3.5)


def _loopback(api: ApiClient, info: dict[str, Any], no_browser: bool, timeout: float) -> Any:
    """RFC 8252: a browser on this machine, back to a loopback address, with PKCE."""
    server, got, arrived = _listen()
    try:
        redirect_uri = f"http://127.0.0.1:{server.server_address[1]}{CALLBACK}"
        state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        verifier = secrets.token_urlsafe(48)
        with OAuth2Client(
            info["client_id"],
            redirect_uri=redirect_uri,
            scope=" ".join(info["scopes"]),
            code_challenge_method="S256",
        ) as oauth:
            sign_in_url, _ = oauth.create_authorization_url(
                info["authorization_endpoint"], state=state, nonce=nonce, code_verifier=verifier
            )
        out.echo(f"Sign in with {info['provider_name']} at:\n  {sign_in_url}", err=True)
        if not no_browser:
            webbrowser.open(sign_in_url)
        if not arrived.wait(timeout):
            raise Unauthenticated(f"no sign-in came back within {timeout:g} s; run it again")
    finally:
        server.shutdown()
        server.server_close()
    if got.get("state") != state:
        raise Unauthenticated("the sign-in came back for another request (state); run it again")
    if "code" not in got:
        said = got.get("error_description") or got.get("error") or "no code"
        raise Unauthenticated(f"the identity provider refused the sign-in: {said}")
    form = {"code": got["code"], "code_verifier": verifier, "redirect_uri": redirect_uri}
    return api.post_form("/api/sso/token", {**form, "nonce": nonce})


@click.command("logout")
@connection_options
def logout(url: str | None, data_dir: Path, ca_cert: Path | None, ssl_no_verify: bool) -> None:
    """End the session of `gpufleet login` at the orchestrator and forget it here."""
    target = resolve_url(url, data_dir)
    gone = signins.forget(target)
    if gone is None:
        out.echo(f"Not signed in to {target}.")
        return
    verify = verify_option(ca_cert, ssl_no_verify)
    try:
        with ApiClient(target, str(gone["token"]), data_dir=data_dir, verify=verify) as api:
            api.delete("/api/sso/session")
    except GpufleetError:
        pass  # forgotten here; an expired or unreachable session ends by itself within the hour
    out.echo(f"Signed out of {target}.")
