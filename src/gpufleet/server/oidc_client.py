"""The OpenID Connect provider, as gpufleet's single sign-on talks to it (Authlib's OAuth 2
client over httpx, joserfc for the ID token).

gpufleet is one confidential client: the browser's sign-in and the CLI's (`gpufleet login`)
both redeem their authorization code here, with the client's secret and the PKCE verifier of
whoever started the flow, so the provider's tokens never need a second registration and a
stolen code is worth nothing without its verifier. Discovery and the keys are read on first
use and kept; the keys are read again when a token names one not seen yet (a rotation).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import httpx

from gpufleet.errors import (
    ConfigurationError,
    IdentityProviderDown,
    InvalidInput,
    Unauthenticated,
)
from gpufleet.server.settings import ServerSettings

# Authlib and joserfc (with Authlib's own copy of httpx) are imported where they are used: a
# server without single sign-on never loads them, a tenth of a second of every start (#32).
if TYPE_CHECKING:
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from joserfc.jwk import KeySet

log = logging.getLogger("gpufleet.server.oidc")
LEEWAY_S = 60  # clock skew allowed between the provider and this server
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
TIMEOUT_S = 10.0
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@dataclass
class Provider:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...]
    name: str
    _metadata: dict[str, Any] | None = None
    _keys: KeySet | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def named(
        cls,
        issuer: str,
        client_id: str,
        client_secret: str,
        scopes: tuple[str, ...],
        name: str | None,
    ) -> Provider:
        return cls(
            issuer.rstrip("/"),
            client_id,
            client_secret,
            scopes,
            name or urlsplit(issuer).hostname or issuer,
        )

    def _client(self, **extra: Any) -> AsyncOAuth2Client:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        return AsyncOAuth2Client(
            self.client_id,
            self.client_secret,
            scope=" ".join(self.scopes),
            code_challenge_method="S256",
            timeout=TIMEOUT_S,
            **extra,
        )

    async def _get(self, url: str, **kw: Any) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
                resp = await http.get(url, **kw)
                resp.raise_for_status()
                return cast(dict[str, Any], resp.json())
        except (httpx.HTTPError, ValueError) as exc:
            raise IdentityProviderDown(
                f"the identity provider did not answer {url} ({exc}); try again, or ask an "
                "admin to check --oidc-issuer"
            ) from exc

    async def metadata(self) -> dict[str, Any]:
        """The discovery document; its issuer must be the configured one, exactly."""
        async with self._lock:
            if self._metadata is None:
                found = await self._get(f"{self.issuer}/.well-known/openid-configuration")
                if found.get("issuer", "").rstrip("/") != self.issuer:
                    raise IdentityProviderDown(
                        f"the provider at {self.issuer} says its issuer is "
                        f"{found.get('issuer')!r}; set --oidc-issuer to exactly the issuer"
                    )
                self._metadata = found
            return self._metadata

    async def _key_set(self, fresh: bool) -> KeySet:
        from joserfc.jwk import KeySet

        meta = await self.metadata()
        async with self._lock:
            if self._keys is None or fresh:
                self._keys = KeySet.import_key_set(
                    cast(Any, await self._get(str(meta["jwks_uri"])))
                )
            return self._keys

    async def authorization_url(
        self, redirect_uri: str, state: str, nonce: str, verifier: str
    ) -> str:
        meta = await self.metadata()
        async with self._client(redirect_uri=redirect_uri) as client:
            url, _ = client.create_authorization_url(
                meta["authorization_endpoint"], state=state, nonce=nonce, code_verifier=verifier
            )
        return str(url)

    async def _token(self, **params: Any) -> dict[str, Any]:
        from authlib.integrations.base_client.errors import OAuthError
        from authlib.oauth2 import OAuth2Error

        meta = await self.metadata()
        methods = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        auth = "client_secret_basic" if "client_secret_basic" in methods else methods[0]
        try:
            async with self._client(token_endpoint_auth_method=auth) as client:
                if "refresh_token" in params:
                    token = await client.refresh_token(meta["token_endpoint"], **params)
                else:
                    token = await client.fetch_token(meta["token_endpoint"], **params)
        except (OAuth2Error, OAuthError) as exc:
            raise Unauthenticated(
                f"the identity provider refused: {exc.error} ({exc.description or 'no detail'}); "
                "sign in again"
            ) from exc
        except httpx.HTTPError as exc:
            raise IdentityProviderDown(
                f"the identity provider's token endpoint failed ({exc}); try again"
            ) from exc
        return dict(token)

    async def redeem(self, code: str, redirect_uri: str, verifier: str) -> dict[str, Any]:
        """The tokens for an authorization code (with its PKCE verifier)."""
        return await self._token(
            grant_type="authorization_code",
            code=code,
            redirect_uri=redirect_uri,
            code_verifier=verifier,
        )

    async def refresh(self, refresh_token: str) -> dict[str, Any]:
        return await self._token(refresh_token=refresh_token)

    async def device_authorization(self) -> dict[str, Any]:
        """A device code and the user code to type at the provider (RFC 8628), asked with
        this client's credentials."""
        meta = await self.metadata()
        endpoint = meta.get("device_authorization_endpoint")
        if not endpoint:
            raise InvalidInput(
                "the identity provider offers no device flow; sign in with `gpufleet login` "
                "on a machine with a browser"
            )
        answer = await self._post(str(endpoint), {"scope": " ".join(self.scopes)})
        if answer.status_code != 200:
            raise IdentityProviderDown(
                f"the identity provider refused a device code ({answer.text[:200]}); try again"
            )
        return cast(dict[str, Any], answer.json())

    async def device_token(self, device_code: str) -> dict[str, Any] | None:
        """The tokens once the person approved the device code; None while they have not
        (`authorization_pending`, `slow_down`)."""
        meta = await self.metadata()
        answer = await self._post(
            str(meta["token_endpoint"]), {"grant_type": DEVICE_GRANT, "device_code": device_code}
        )
        if answer.status_code == 200:
            return cast(dict[str, Any], answer.json())
        try:
            error = str(answer.json().get("error"))
        except ValueError:
            error = answer.text[:80]
        if error in ("authorization_pending", "slow_down"):
            return None
        raise Unauthenticated(
            f"the identity provider refused the device sign-in: {error}; run `gpufleet login` again"
        )

    async def _post(self, url: str, form: dict[str, str]) -> httpx.Response:
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
                return await http.post(
                    url,
                    data={"client_id": self.client_id, **form},
                    auth=(self.client_id, self.client_secret),
                )
        except httpx.HTTPError as exc:
            raise IdentityProviderDown(
                f"the identity provider did not answer {url} ({exc}); try again"
            ) from exc

    async def userinfo(self, access_token: str) -> dict[str, Any]:
        meta = await self.metadata()
        return await self._get(
            str(meta["userinfo_endpoint"]), headers={"Authorization": f"Bearer {access_token}"}
        )

    async def verify(self, id_token: str, now: float, nonce: str | None) -> dict[str, Any]:
        """The claims of an ID token this provider signed for this client, unexpired, and
        carrying `nonce` when one is given; Unauthenticated otherwise."""
        from joserfc import jwt
        from joserfc.errors import InvalidKeyIdError, JoseError

        try:
            keys = await self._key_set(fresh=False)
            try:
                token = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
            except InvalidKeyIdError:
                token = jwt.decode(  # a key rotated in since: read the keys again, once
                    id_token, await self._key_set(fresh=True), algorithms=list(ALGORITHMS)
                )
            options: dict[str, Any] = {
                "iss": {"essential": True, "value": self.issuer},
                "aud": {"essential": True, "value": self.client_id},
                "sub": {"essential": True},
                "exp": {"essential": True},
            }
            if nonce is not None:
                options["nonce"] = {"essential": True, "value": nonce}
            jwt.JWTClaimsRegistry(now=int(now), leeway=LEEWAY_S, **options).validate(token.claims)
        except (JoseError, ValueError) as exc:
            log.info("refused an ID token: %s", exc)
            raise Unauthenticated(
                f"the identity provider's ID token was refused ({exc}); sign in again"
            ) from exc
        return dict(token.claims)


def sso_provider(settings: ServerSettings) -> Provider | None:
    """The provider the settings name, its secret read from its file; None when off."""
    if not (settings.oidc_issuer and settings.oidc_client_id and settings.oidc_client_secret_file):
        return None
    try:
        secret = settings.oidc_client_secret_file.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"--oidc-client-secret-file {settings.oidc_client_secret_file}: {exc.strerror}"
        ) from exc
    if not secret:
        raise ConfigurationError(
            f"--oidc-client-secret-file {settings.oidc_client_secret_file} is empty: put the "
            "client's secret in it"
        )
    return Provider.named(
        settings.oidc_issuer,
        settings.oidc_client_id,
        secret,
        settings.oidc_scopes,
        settings.oidc_provider_name,
    )
