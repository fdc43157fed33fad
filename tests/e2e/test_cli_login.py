"""`gpufleet login` and `logout` against a real orchestrator and a real OpenID provider: the
loopback flow (the browser's part driven over HTTP at the URL the CLI prints) and the device
flow (the code typed at the provider's page), the session kept 0600 in the config folder and
used instead of a key, refreshed once expired, ended."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import orjson
import pytest

from tests.e2e.commands import gpufleet as in_process
from tests.e2e.conftest import GPUFLEET, ServerProcess, serving
from tests.oidc_provider import IdentityProvider


@pytest.fixture(scope="module")
def sso_server(
    tmp_path_factory: pytest.TempPathFactory, identity_provider: IdentityProvider
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("sso-server")
    more = {"oidc-group-map": "gpu-admins=admin"}
    yield from serving(data, **identity_provider.server_flags(data, **more))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GPUFLEET_CONFIG_DIR": str(tmp_path / "config")}


def gpufleet(
    server: ServerProcess, env: dict[str, str], tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """A command in this process (tests/e2e/commands.py): `login` alone, which waits for the
    browser, is a process of its own."""
    # a data folder without admin.token: the only credential is the login's
    where = ["--url", server.url, "--data-dir", str(tmp_path / "none")]
    return in_process(*args, *where, env=env)


def start_login(
    server: ServerProcess, env: dict[str, str], tmp_path: Path
) -> tuple[subprocess.Popen[str], str]:
    where = ["--url", server.url, "--data-dir", str(tmp_path / "none")]
    proc = subprocess.Popen(
        [GPUFLEET, "login", "--no-browser", "--timeout", "60", *where],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    said = proc.stderr.readline()
    assert "Sign in with" in said, said + proc.stderr.read()
    if " at:" not in said:  # the device flow says it all on its first line
        return proc, said
    return proc, proc.stderr.readline().strip()


def saved(env: dict[str, str]) -> dict[str, Any]:
    path = Path(env["GPUFLEET_CONFIG_DIR"]) / "signins.json"
    found: dict[str, Any] = orjson.loads(path.read_bytes())
    return found


def test_login_signs_in_through_the_browser_and_commands_use_the_session(
    sso_server: ServerProcess,
    identity_provider: IdentityProvider,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    identity_provider.set_user("sub-cli-e2e", preferred_username="cli-e2e", groups=["gpu-admins"])
    # without a login nor a key, a command is refused
    assert gpufleet(sso_server, env, tmp_path, "users", "show", "me").returncode != 0
    proc, url = start_login(sso_server, env, tmp_path)
    asked = parse_qs(urlsplit(url).query)
    assert asked["redirect_uri"][0].startswith("http://127.0.0.1:")
    assert asked["code_challenge_method"] == ["S256"] and asked["nonce"][0]
    back = identity_provider.authorize(url, "sub-cli-e2e")
    assert back.startswith(asked["redirect_uri"][0])
    assert httpx.get(back).status_code == 200
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "as cli-e2e (level admin)" in stdout
    path = Path(env["GPUFLEET_CONFIG_DIR"]) / "signins.json"
    assert path.stat().st_mode & 0o777 == 0o600
    first = saved(env)[sso_server.url]
    assert first["token"].startswith("gfs_") and first["refresh_token"]

    me = gpufleet(sso_server, env, tmp_path, "users", "show", "me", "--json")
    assert me.returncode == 0, me.stderr
    assert orjson.loads(me.stdout)["name"] == "cli-e2e"

    # expired: the next command refreshes it at the orchestrator
    kept = saved(env)
    kept[sso_server.url]["expires_at"] = "2000-01-01T00:00:00+00:00"
    path.write_bytes(orjson.dumps(kept))
    again = gpufleet(sso_server, env, tmp_path, "users", "show", "me", "--json")
    assert again.returncode == 0, again.stderr
    latest = saved(env)[sso_server.url]["token"]
    assert latest != first["token"]

    out = gpufleet(sso_server, env, tmp_path, "logout")
    assert out.returncode == 0 and "Signed out" in out.stdout
    assert sso_server.url not in saved(env)
    refused = httpx.get(
        f"{sso_server.url}/api/users/me",
        headers={"Authorization": f"Bearer {latest}"},
    )
    assert refused.status_code == 401
    assert gpufleet(sso_server, env, tmp_path, "users", "show", "me").returncode != 0


def test_login_refuses_a_callback_for_another_request(
    sso_server: ServerProcess,
    identity_provider: IdentityProvider,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    proc, url = start_login(sso_server, env, tmp_path)
    redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
    forged = f"{redirect}?{urlencode({'code': 'stolen', 'state': 'not-ours'})}"
    assert httpx.get(forged).status_code == 200
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "another request" in stderr
    assert not (Path(env["GPUFLEET_CONFIG_DIR"]) / "signins.json").exists()


@pytest.fixture(scope="module")
def device_server(
    tmp_path_factory: pytest.TempPathFactory, device_identity_provider: IdentityProvider
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("sso-device-server")
    yield from serving(data, **device_identity_provider.server_flags(data))


def test_login_uses_the_device_flow_where_the_provider_offers_it(
    device_server: ServerProcess,
    device_identity_provider: IdentityProvider,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    device_identity_provider.set_user("sub-device", preferred_username="on-a-tablet")
    proc, said = start_login(device_server, env, tmp_path)
    found = re.search(r"open (\S+) and enter the code (\S+)", said)
    assert found, said
    device_identity_provider.approve_device(found[1], found[2], "sub-device")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "as on-a-tablet (level viewer)" in stdout
    me = gpufleet(device_server, env, tmp_path, "users", "show", "me", "--json")
    assert me.returncode == 0, me.stderr
    assert orjson.loads(me.stdout)["name"] == "on-a-tablet"
