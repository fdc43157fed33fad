"""A local wheelhouse made by the test itself: tiny wheels written with the standard library,
so that uv installs jobs' environments with nothing downloaded (docs/jobs.md)."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "gpufleet_testpkg"


def write_wheel(folder: Path, name: str = PACKAGE, version: str = "1.0", value: str = "42") -> Path:
    """A pure-Python wheel of package `name` whose `VALUE` is `value`."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files: Mapping[str, str] = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = [
        f"{path},{_digest(text.encode())},{len(text.encode())}" for path, text in files.items()
    ]
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def offline_env(cache: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment in which uv (and pip's variables) can reach no index: only the
    wheelhouse the worker is pointed at with --find-links, and a uv cache of the test's."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.startswith(("UV_", "PIP_"))
    }
    env.update(
        {"UV_NO_INDEX": "1", "UV_OFFLINE": "1", "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(cache)}
    )
    return env


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
