"""Single sign-on's bodies: what the CLI's sign-in sends and is answered."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from gpufleet.server.schemas.base import Strict

Opaque = Field(min_length=1, max_length=4096)


class SsoInfo(Strict):
    enabled: bool
    issuer: str | None = None
    client_id: str | None = None
    provider_name: str | None = None
    scopes: list[str] = []
    authorization_endpoint: str | None = None
    device_flow: bool = False  # the provider offers the device authorization grant
    oidc_only: bool = False


class RedeemCode(Strict):
    code: str = Opaque
    code_verifier: str = Field(min_length=43, max_length=128)  # RFC 7636's bounds
    redirect_uri: str = Field(min_length=1, max_length=512)
    nonce: str = Opaque


class Refresh(Strict):
    refresh_token: str = Opaque


class CliSessionOut(Strict):
    token: str
    expires_at: datetime
    refresh_token: str | None
    user: str
    level: str


class DeviceStart(Strict):
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None = None
    expires_in: int
    interval: int


class DeviceCode(Strict):
    device_code: str = Opaque


class Pending(Strict):
    pending: bool = True
