"""`gpufleet` operator commands run by the e2e tests against real servers.

`gpufleet(...)` runs a command in the test's own process, through the entry point the
installed script calls (`gpufleet.cli.main:main`), with the arguments, environment, working
folder and standard input it would have had as a process; it answers as `subprocess.run`
does (exit code, stdout, stderr; an exception nothing caught is printed as the interpreter
would: a traceback on stderr, exit code 1). The command still talks HTTP to a real server over
a real socket: what is saved is the interpreter's start and the CLI's imports, a quarter to
half a CPU-second a command (#32). `gpufleet_process(...)` runs the installed command itself,
for the tests whose claim is the process (the script, its imports, a terminal, a signal).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import subprocess
import sys
import traceback
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from click import termui
from click.testing import CliRunner

from gpufleet.cli import output
from gpufleet.cli.main import main
from tests.e2e.conftest import GPUFLEET, ServerProcess

Result = subprocess.CompletedProcess[str]
# What `__main__` is in the installed command's process: its script, a module of no package.
SCRIPT = types.ModuleType("__main__")


def environment(**given: str) -> dict[str, str]:
    """Ours without any GPUFLEET_* variable but those `given`, plain and wide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    return {**env, "NO_COLOR": "1", "COLUMNS": "200", **given}


def gpufleet(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, input: str | None = None
) -> Result:
    """`gpufleet ARGS` in this process, with exactly `env` as its environment."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    argv, started = sys.argv, sys.modules["__main__"]
    output.console.cache_clear()  # made anew by each process: it reads the environment
    output.errors.cache_clear()
    with CliRunner().isolation(input=input, env={**unset, **env}) as (out, err, _):
        code = 0
        sys.argv = [GPUFLEET, *args]
        sys.modules["__main__"] = SCRIPT  # click names the program after it: `gpufleet`
        termui.visible_prompt_func = builtins.input  # as a process does: answers not echoed
        try:
            with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
                main()
        except SystemExit as exc:
            code = _exit_code(exc)
        except Exception:
            traceback.print_exc()  # to the command's stderr, as an uncaught exception would be
            code = 1
        finally:
            sys.argv, sys.modules["__main__"] = argv, started
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess([GPUFLEET, *args], code, stdout, stderr)


def _exit_code(exc: SystemExit) -> int:
    """What a process exiting with `exc` exits with (a message: printed, and 1)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def gpufleet_process(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, input: str | None = None
) -> Result:
    """The installed `gpufleet ARGS` as a process of its own."""
    return subprocess.run(
        [GPUFLEET, *args],
        env=dict(env),
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def server_env(server: ServerProcess | None, key: str | None = None) -> dict[str, str]:
    """Our environment pointed at `server` (GPUFLEET_URL, GPUFLEET_API_KEY: its admin key
    unless `key`); None: at no server."""
    if server is None:
        return environment()
    return environment(GPUFLEET_URL=server.url, GPUFLEET_API_KEY=key or server.admin_key)


def gf(
    server: ServerProcess | None, *args: str, key: str | None = None, input: str | None = None
) -> Result:
    """`gpufleet ARGS` (in this process) with GPUFLEET_URL and GPUFLEET_API_KEY pointing at
    `server`."""
    return gpufleet(*args, env=server_env(server, key), input=input)


def ok(result: Result) -> str:
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def as_json(result: Result) -> Any:
    return json.loads(ok(result))


def one_line_error(result: Result) -> str:
    """The single `Error: …` line of a failed command, checked to be alone and traceback-free."""
    assert result.returncode == 1, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


HTTP_TERMS = re.compile(r"\bHTTP\b|/api/|\b[45]\d\d\b")


def in_own_terms(message: str) -> str:
    """`message`, checked to speak as a command does: no HTTP, no API path, no status code
    (a code inside a job id, like j_d4403d…, is part of a word and passes)."""
    assert not HTTP_TERMS.search(message), message
    return message
