"""A local S3-compatible server (moto's), standing in for a cloud bucket that cannot be
reached from here: the tests and the benchmark run the object-storage backend against it.

It runs in a child process, not a thread: moto keeps every object in its own memory, and a
child's memory is not the measured process's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from gpufleet.client_tls import verify_for


class S3Unavailable(RuntimeError):
    """moto's server did not start."""


@contextlib.contextmanager
def moto_s3(within: float = 30.0) -> Iterator[str]:
    """Start moto's S3 server on a free port; yields its endpoint URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(endpoint, server, within)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_until_up(endpoint: str, server: subprocess.Popen[bytes], within: float) -> None:
    deadline = time.monotonic() + within
    # One client for every poll, loading no CA bundle (bench.server's BenchServer.start says
    # why).
    with httpx.Client(timeout=1, verify=verify_for([endpoint], True)) as probe:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise S3Unavailable(
                    f"moto's S3 server exited with {server.returncode} before serving"
                )
            try:
                probe.get(endpoint)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            return
    raise S3Unavailable(f"moto's S3 server did not answer on {endpoint} within {within:g} s")


def new_bucket(endpoint: str, prefix: str = "artifacts") -> str:
    """A fresh bucket on the server; its name."""
    bucket = f"{prefix}-{secrets.token_hex(4)}"
    httpx.put(f"{endpoint}/{bucket}").raise_for_status()
    return bucket


def s3_environment(endpoint: str) -> dict[str, str]:
    """The `AWS_*` variables a process needs to use the server (moto takes any keys)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """These environment variables set for the block (children started in it inherit them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
