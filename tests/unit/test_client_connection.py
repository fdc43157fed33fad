"""Where `Client()` connects (client/connection.py): the CLI's rules, read from what it is
given, else the flags' environment variables, else the orchestrator's data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet import address
from gpufleet.client.connection import connection
from gpufleet.errors import ConfigurationError


def _folder(tmp_path: Path, url: str | None = "http://10.0.0.5:9000", key: str = "adm") -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "admin.token").write_text(key + "\n")
    if url is not None:
        address.write(folder, address.Address(url=url, public_url=url))
    return folder


def test_the_data_folder_gives_the_address_and_the_admin_key(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    found = connection(environ={"GPUFLEET_DATA_DIR": str(folder)})
    assert (found.url, found.api_key, found.data_dir) == ("http://10.0.0.5:9000", "adm", folder)
    assert found.verify is True


def test_the_variables_come_before_the_folder_and_what_is_given_before_them(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path)
    environ = {
        "GPUFLEET_DATA_DIR": str(folder),
        "GPUFLEET_URL": "http://orchestrator:8001",
        "GPUFLEET_API_KEY": "from-env",
        "GPUFLEET_SSL_NO_VERIFY": "true",
    }
    found = connection(environ=environ)
    assert (found.url, found.api_key, found.verify) == (
        "http://orchestrator:8001",
        "from-env",
        False,
    )
    given = connection("http://given:1", " given-key ", ssl_no_verify=False, environ=environ)
    assert (given.url, given.api_key, given.verify) == ("http://given:1", "given-key", True)


def test_no_key_anywhere_says_how_to_give_one(tmp_path: Path) -> None:
    environ = {"GPUFLEET_DATA_DIR": str(tmp_path / "none")}
    with pytest.raises(ConfigurationError, match="GPUFLEET_API_KEY"):
        connection(environ=environ)
