"""A real OpenID Connect provider for single sign-on's tests: `oidc-provider-mock`, run as
its own process on a free port (its `python -m oidc_provider_mock`), as a deployment's
provider would be. Its authorization page takes the subject typed in; a subject's claims
(groups, preferred_username) are set beforehand through its `PUT /users/<sub>`.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import httpx

from tests.waiting import wait_until

CLIENT_ID = "gpufleet-test"
CLIENT_SECRET = "test-client-secret"  # the mock takes any secret: what matters is it is sent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class IdentityProvider:
    issuer: str

    def set_user(self, sub: str, **claims: Any) -> None:
        answer = httpx.put(f"{self.issuer}/users/{quote(sub, safe='')}", json=claims)
        assert answer.status_code == 204, answer.text

    def authorize(self, url: str, sub: str) -> str:
        """Submit the provider's authorization page for `sub`: where it sends the browser."""
        answer = httpx.post(url, data={"sub": sub})
        assert answer.status_code in (302, 303), answer.text
        return answer.headers["location"]

    def code(self, sub: str, redirect_uri: str, nonce: str, challenge: str, host: str = "") -> str:
        """An authorization code for `sub`, as a CLI's browser would bring back."""
        base = self.issuer.replace("127.0.0.1", host) if host else self.issuer
        query = urlencode(
            {
                "client_id": CLIENT_ID,
                "response_type": "code",
                "redirect_uri": redirect_uri,
                "scope": "openid profile email",
                "state": "s",
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        back = self.authorize(f"{base}/oauth2/authorize?{query}", sub)
        return parse_qs(urlsplit(back).query)["code"][0]

    def id_token(self, sub: str, nonce: str, host: str = "") -> str:
        """An ID token the provider signs for `sub` (its issuer named as `host` says)."""
        redirect = "http://127.0.0.1:9/cb"
        code = self.code(sub, redirect, nonce, "x" * 43, host)
        base = self.issuer.replace("127.0.0.1", host) if host else self.issuer
        answer = httpx.post(
            f"{base}/oauth2/token",
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect},
            auth=(CLIENT_ID, CLIENT_SECRET),
        )
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["id_token"]
        return token

    def approve_device(self, verification_uri: str, user_code: str, sub: str) -> None:
        """Type the user code and the subject on the device page (tests.oidc_device_provider)."""
        answer = httpx.post(verification_uri, data={"user_code": user_code, "sub": sub})
        assert answer.status_code == 200, answer.text

    def deny(self, url: str) -> str:
        """Press the authorization page's Deny: where it sends the browser."""
        answer = httpx.post(url, data={"action": "deny"})
        assert answer.status_code in (302, 303), answer.text
        return answer.headers["location"]

    def secret_file(self, folder: Path) -> Path:
        path = folder / "oidc-client-secret"
        path.write_text(CLIENT_SECRET + "\n")
        path.chmod(0o600)
        return path

    def settings(self, folder: Path, **more: Any) -> dict[str, Any]:
        """The `ServerSettings` fields that point an orchestrator at this provider."""
        return {
            "oidc_issuer": self.issuer,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret_file": self.secret_file(folder),
            "oidc_provider_name": "Mock IdP",
            **more,
        }

    def server_flags(self, folder: Path, **more: Any) -> dict[str, Any]:
        """`gpufleet server`'s flags (tests/e2e/conftest.py `serving`) for this provider."""
        return {
            "oidc-issuer": self.issuer,
            "oidc-client-id": CLIENT_ID,
            "oidc-client-secret-file": str(self.secret_file(folder)),
            **more,
        }


@contextlib.contextmanager
def running_provider(module: str = "oidc_provider_mock") -> Iterator[IdentityProvider]:
    """The provider as a process; `tests.oidc_device_provider` adds the device grant."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    issuer = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"the provider exited: {proc.stderr.read() if proc.stderr else ''}"
            )
        try:
            return httpx.get(f"{issuer}/.well-known/openid-configuration").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout=20, message="the OpenID provider to answer")
        yield IdentityProvider(issuer)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
