"""`make up` as a new operator meets it (#33.4): quiet, its banner last, and every line of the
banner true wherever its data folder is and wherever the CLI line is run from."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
BANNER_END = "Press Ctrl-C to stop."


class Up:
    """scripts/up.sh as a real process, its output read as it comes."""

    def __init__(self, data: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env.pop("LOG_LEVEL", None)  # make up's own default: quiet
        env |= {"PORT": str(port), "DATA": str(data), "BIN": str(Path(sys.executable).parent)}
        self.proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "up.sh")],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def banner(self) -> list[str]:
        wait_until(
            lambda: BANNER_END in self.lines or self.proc.poll() is not None,
            timeout=60,
            message="make up's banner",
        )
        assert BANNER_END in self.lines, "make up stopped:\n" + "\n".join(self.lines)
        start = next(i for i, line in enumerate(self.lines) if "gpufleet is up" in line)
        return self.lines[start : self.lines.index(BANNER_END) + 1]

    def stop(self) -> list[str]:
        """Ctrl-C, then everything it wrote, to the end."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        self.proc.wait(timeout=20)
        self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.lines


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    # DATA away from the checkout, as `make up DATA=/tmp/x` puts it.
    started = Up(tmp_path / "elsewhere" / "data", free_port())
    yield started
    started.stop()


def test_make_up_banners_cli_line_works_from_anywhere_and_polling_is_not_logged(
    up: Up, tmp_path: Path
) -> None:
    banner = up.banner()
    cli = [line.split("CLI:", 1)[1].strip() for line in banner if "CLI:" in line]
    assert len(cli) == 1, banner

    # Run as printed, from another folder, with no GPUFLEET_ settings in the environment.
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    ran = subprocess.run(
        shlex.split(cli[0]), cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "local" in ran.stdout

    # What the UI and an operator's script poll: none of it is logged.
    data = tmp_path / "elsewhere" / "data"
    key = (data / "admin.token").read_text().strip()
    url = next(line.split("orchestrator on", 1)[1].split(",")[0].strip() for line in banner)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        for path in ("/api/queue", "/api/admin/workers", "/healthz", "/signin", "/queue"):
            assert client.get(path).status_code < 500, path
    after_banner = up.stop()[up.lines.index(BANNER_END) + 1 :]
    assert not [line for line in after_banner if "HTTP/1.1" in line or "GET /" in line]
    assert not [line for line in up.lines if "HTTP/1.1" in line], "access log lines"
