"""The worker's token out of its jobs' reach (docs/security.md, "Keeping jobs away from
their worker's keys").

A job may run as the worker's own OS user, and such a process reads `/proc/<worker>/cmdline`
and `/proc/<worker>/environ`. Removing the token from `os.environ` changes neither: /proc
shows the arguments and the environment the process was started with. So a worker given its
token in its arguments (`--worker-token`) or its environment (`GPUFLEET_WORKER_TOKEN`,
`SIMPLETUNER_WORKER_TOKEN`) starts itself again (`execv`, the same pid) without it, and hands
the token to its new self through a pipe it inherits and reads once. Then it makes itself
non-dumpable (`PR_SET_DUMPABLE`), so a process of the same user that is not root cannot read
its memory or its environ at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from gpufleet.errors import ConfigurationError

log = logging.getLogger(__name__)

TOKEN_OPTION = "--worker-token"
TOKEN_VARS = ("GPUFLEET_WORKER_TOKEN", "SIMPLETUNER_WORKER_TOKEN")
# The pipe a re-executed worker reads its token from: a number, never the token.
INHERITED_FD_VAR = "GPUFLEET_INHERITED_KEY_FD"
_PR_SET_DUMPABLE = 4


def inherited_token() -> str | None:
    """The token the worker's earlier self passed through its pipe; None if it passed none.
    The pipe is read to its end and closed: nothing of it is left to inherit."""
    fd_text = os.environ.pop(INHERITED_FD_VAR, None)
    if fd_text is None:
        return None
    try:
        fd = int(fd_text)
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
        os.close(fd)
    except (ValueError, OSError) as exc:
        raise ConfigurationError(
            f"the worker could not read its token back after restarting itself ({exc}); "
            "start it again"
        ) from exc
    return b"".join(chunks).decode()


def read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"--worker-token-file {path}: cannot read it ({exc}); give the file that holds "
            "the worker's token"
        ) from exc
    if not token:
        raise ConfigurationError(
            f"--worker-token-file {path} is empty: put the token printed when the worker was "
            "created in it"
        )
    return token


def shown_in_proc(token: str) -> bool:
    """Whether /proc shows `token` in this process's arguments or environment."""
    secret = token.encode()
    for part in ("cmdline", "environ"):
        try:
            if secret in Path(f"/proc/self/{part}").read_bytes():
                return True
        except OSError:  # no /proc (not Linux): nothing there to hide from
            return False
    return False


def restart_without(token: str) -> NoReturn:
    """Run this same command again, in this process, without the token in its arguments and
    environment; the new self reads it from an inherited pipe (`inherited_token`)."""
    read_end, write_end = os.pipe()
    os.write(write_end, token.encode())  # a token is far below a pipe's buffer
    os.close(write_end)
    os.set_inheritable(read_end, True)
    env = scrubbed_environ(os.environ)
    env[INHERITED_FD_VAR] = str(read_end)
    argv = [sys.executable, *without_token(sys.orig_argv[1:])]
    log.debug("restarting without the worker token in its arguments and environment")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os.execve(sys.executable, argv, env)


def without_token(argv: Sequence[str]) -> list[str]:
    """`argv` less `--worker-token TOKEN` and `--worker-token=TOKEN`."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == TOKEN_OPTION:
            skip = True
        elif not arg.startswith(TOKEN_OPTION + "="):
            kept.append(arg)
    return kept


def scrubbed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in (*TOKEN_VARS, INHERITED_FD_VAR)}


def make_undumpable() -> None:
    """No core dump, no ptrace, no /proc/<pid>/mem or environ for processes of the same
    user that are not root (Linux; elsewhere nothing is done)."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            log.warning("could not make the worker non-dumpable: errno %s", ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        log.warning("could not make the worker non-dumpable: %s", exc)
