"""oidc-provider-mock with the device authorization grant (RFC 8628) added, run as a process
(`python -m tests.oidc_device_provider --port N`) for `gpufleet login`'s device flow.

The mock itself has no device grant; this adds one beside its own endpoints, on the same
app, storage and signing key: the discovery document names `/oauth2/device`; `/device`
is the page where a person types the user code and their subject; the token endpoint answers
`authorization_pending` until then, and afterwards an ID token signed by the mock's key, an
access token its userinfo endpoint takes and a refresh token its refresh grant takes.
"""

from __future__ import annotations

import argparse
import html
import os
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
import uvicorn
from joserfc import jwt
from joserfc.jwk import RSAKey
from oidc_provider_mock import app as mock_app
from oidc_provider_mock._storage import AccessToken, RefreshToken, User

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
PROFILE = ("preferred_username", "name", "email")
LIFETIME = 3600


def build() -> flask.Flask:
    app = mock_app()
    pending: dict[str, dict[str, Any]] = {}  # device code -> its request, and who approved
    codes: dict[str, str] = {}  # user code -> device code

    def base() -> str:
        return flask.request.host_url.rstrip("/")

    @app.post("/oauth2/device")
    def device_authorization() -> Any:
        auth = flask.request.authorization
        client_id = auth.username if auth and auth.username else flask.request.form["client_id"]
        device_code, user_code = secrets.token_urlsafe(16), secrets.token_hex(4).upper()
        scope = flask.request.form.get("scope", "openid")
        pending[device_code] = {"client_id": client_id, "scope": scope, "sub": None}
        codes[user_code] = device_code
        return {
            "device_code": device_code,
            "user_code": user_code,
            "verification_uri": f"{base()}/device",
            "verification_uri_complete": f"{base()}/device?user_code={user_code}",
            "expires_in": 300,
            "interval": 1,
        }

    @app.route("/device", methods=["GET", "POST"])
    def verify() -> Any:
        if flask.request.method == "POST":
            device_code = codes.pop(flask.request.form.get("user_code", ""), None)
            if device_code is None:
                return "unknown code", 400
            pending[device_code]["sub"] = flask.request.form["sub"]
            return "Approved: go back to your terminal."
        user_code = html.escape(flask.request.args.get("user_code", ""))
        return (
            '<form method="post"><input name="user_code" placeholder="user code" '
            f'value="{user_code}"><input name="sub" placeholder="sub">'
            '<button type="submit">Authorize</button></form>'
        )

    config_view = app.view_functions["oidc-provider-mock.openid_config"]

    def config_with_device() -> Any:
        found = dict(config_view().get_json())
        found["device_authorization_endpoint"] = f"{base()}/oauth2/device"
        found["grant_types_supported"] = [*found["grant_types_supported"], DEVICE_GRANT]
        return found

    app.view_functions["oidc-provider-mock.openid_config"] = config_with_device
    token_view = app.view_functions["oidc-provider-mock.issue_token"]

    def token() -> Any:
        form = flask.request.form
        if form.get("grant_type") != DEVICE_GRANT:
            return token_view()
        request = pending.get(form.get("device_code", ""))
        if request is None:
            return {"error": "invalid_grant"}, 400
        if request["sub"] is None:
            return {"error": "authorization_pending"}, 400
        del pending[form["device_code"]]
        return _tokens(request["sub"], request["client_id"], request["scope"], base())

    app.view_functions["oidc-provider-mock.issue_token"] = token
    return app


def _tokens(sub: str, client_id: str, scope: str, issuer: str) -> dict[str, Any]:
    storage = flask.g.oidc_provider_mock_storage
    user = storage.get_user(sub)
    if user is None:
        user = User(sub=sub, claims={"email": sub})
        storage.store_user(user)
    access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    expires = datetime.now(UTC) + timedelta(seconds=LIFETIME)
    storage.store_access_token(
        AccessToken(token=access, user_id=sub, scope=scope, expires_at=expires)
    )
    storage.store_refresh_token(
        RefreshToken(
            token=refresh,
            user_id=sub,
            scope=scope,
            expires_at=expires,
            client_id=client_id,
            access_token=access,
        )
    )
    now = int(time.time())
    claims = {
        **user.claims,
        "iss": issuer,
        "sub": sub,
        "aud": client_id,
        "iat": now,
        "exp": now + LIFETIME,
    }
    key = RSAKey.import_key(storage.jwk.as_dict(is_private=True))
    id_token = jwt.encode({"alg": "RS256"}, claims, key)
    return {
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": LIFETIME,
        "refresh_token": refresh,
        "id_token": id_token,
        "scope": scope,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # as the mock's own command does
    uvicorn.run(build(), interface="wsgi", host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
