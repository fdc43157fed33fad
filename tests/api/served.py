"""The in-process app on a real socket, and SimpleTuner's own publisher read from its wheel.

boto3 speaks HTTP over sockets, not ASGI: `serve` runs uvicorn on the test's event loop in
front of the `Fleet`'s app (its fake clock and stopped sweeps kept), plain or with TLS.
`trainer_publishing` is `simpletuner/helpers/publishing/` of the released wheel, unchanged
(each file checked against the wheel's RECORD): the trainer's `PublishingManager` and its S3
provider import only the standard library and boto3, so the tests run the trainer's own code.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import importlib
import logging
import socket
import sys
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest
import trustme
import uvicorn
from fastapi import FastAPI

from tests.waiting import wait_until_async

AGENT_VERSION = "4.10.1"
AGENT_WHEEL = Path(sys.prefix) / "agent-wheels" / f"simpletuner-{AGENT_VERSION}-py3-none-any.whl"
PUBLISHING = "simpletuner/helpers/publishing/"
PUBLISHING_FILES = ("__init__.py", "manager.py", "providers/")
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@contextlib.asynccontextmanager
async def serve(
    app: FastAPI, sock: socket.socket, cert: trustme.LeafCert | None = None, tmp: Path | None = None
) -> AsyncIterator[None]:
    """uvicorn on `sock` in front of `app` (its lifespan already run by the `Fleet`)."""
    tls: dict[str, str] = {}
    if cert is not None and tmp is not None:
        cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
        tls = {"ssl_certfile": str(tmp / "cert.pem"), "ssl_keyfile": str(tmp / "key.pem")}
    levels = {name: logging.getLogger(name).level for name in UVICORN_LOGGERS}
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=1,
        **tls,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))

    def started() -> bool:
        if task.done():
            task.result()  # raises what stopped it
        return bool(server.started)

    try:
        await wait_until_async(started, timeout=30, message="the server to start", interval=0.01)
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        for name, level in levels.items():  # uvicorn set them for the whole process
            logging.getLogger(name).setLevel(level)


def extract_publishing(root: Path) -> Path:
    """`simpletuner/helpers/publishing/` of the released wheel under `root` (namespace
    packages above it: no `simpletuner/__init__.py`), each file checked against RECORD."""
    if not AGENT_WHEEL.is_file():
        pytest.fail(f"{AGENT_WHEEL} is missing; `make test` (or `make agent-wheel`) fetches it")
    with zipfile.ZipFile(AGENT_WHEEL) as wheel:
        record = wheel.read(f"simpletuner-{AGENT_VERSION}.dist-info/RECORD").decode()
        digests = dict(line.split(",")[:2] for line in record.splitlines() if "," in line)
        for name in wheel.namelist():
            rest = name.removeprefix(PUBLISHING)
            if rest == name or not rest.endswith(".py") or not rest.startswith(PUBLISHING_FILES):
                continue
            source = wheel.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(source).digest()).rstrip(b"=")
            assert digests[name] == f"sha256={digest.decode()}", f"{name} differs from RECORD"
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(source)
    return root


@pytest.fixture(scope="session")
def trainer_publishing(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """`simpletuner.helpers.publishing.manager` of the released wheel."""
    root = extract_publishing(tmp_path_factory.mktemp("trainer-publishing"))
    sys.path.insert(0, str(root))  # `simpletuner` and `helpers` are namespace packages here
    try:
        return importlib.import_module("simpletuner.helpers.publishing.manager")
    finally:
        sys.path.remove(str(root))
