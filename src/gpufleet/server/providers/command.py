"""The `command` provider: a pool's own programs start and stop its machines (docs/capacity.md).

Each call runs an argv (never a shell line) in a process group of its own, its output going to
files (a machine's process left in the background holding them never blocks the call), under
`--pool-call-timeout`: past it, the whole group is sent SIGTERM, then SIGKILL, and the call
fails. `launch` runs in the launch's folder with the new worker's settings in its environment
and prints the instance id as the last line of its stdout; `terminate` is given the id as
`GPUFLEET_INSTANCE_ID`; `list` prints the instances up, one a line. All three are given
`GPUFLEET_POOL`. What a command prints on stderr is kept (its end), the worker's token masked.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpufleet.domain import pools
from gpufleet.errors import ProviderError
from gpufleet.server.providers import Launched, WorkerLaunch, inherited_environment

MAX_INSTANCE_ID = 256  # the launch row's column
# What a cloud names a machine: a VM id, a pod or cluster name, a number; no space, no quote.
INSTANCE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:/@+=-]{{0,{MAX_INSTANCE_ID - 1}}}")
ID_RULE = f"letters, digits and . _ : / @ + = -, at most {MAX_INSTANCE_ID} characters"
KILL_GRACE_S = 5.0  # after SIGTERM at the timeout, before SIGKILL
STDOUT_READ = 65536  # bytes of a command's stdout read back: its end (the launch's last line)
LIST_READ = 4 * 1024 * 1024  # bytes of a list command's stdout read: every id it printed
MAX_LISTED = 10_000  # instances a list may print: a pool is at most 1,000 workers
MASK = "[token]"


@dataclass(frozen=True, slots=True)
class Ran:
    code: int
    stdout: str  # its end, `stdout_read` bytes at most
    stderr: str  # its end, STDERR_KEPT bytes at most
    stdout_size: int  # bytes it printed in all


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    *,
    what: str,
    cwd: Path | None = None,
    secret: str | None = None,
    stdout_read: int = STDOUT_READ,
) -> Ran:
    """Run `argv` to its end, or kill its process group at `timeout_s` (a ProviderError).
    `secret` is masked in what it printed."""

    def said(stream: IO[bytes], limit: int) -> str:
        stream.seek(0, os.SEEK_END)
        stream.seek(max(0, stream.tell() - limit))
        text = stream.read().decode(errors="replace")
        return text.replace(secret, MASK) if secret else text

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,  # its own process group: a timeout kills all of it
            )
        except OSError as exc:
            raise ProviderError(
                f"the {what} command {argv[0]!r} could not start: {exc.strerror or exc}; "
                "check the pool's provider (an absolute path, executable)"
            ) from exc
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ProviderError(
                f"the {what} command did not finish in {timeout_s:g} s and was killed "
                "(--pool-call-timeout)",
                said(err, pools.STDERR_KEPT),
            ) from None
        size = out.seek(0, os.SEEK_END)
        return Ran(code, said(out, stdout_read), said(err, pools.STDERR_KEPT), size)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its group, a grace for the leader to go, then SIGKILL to what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _failed(what: str, ran: Ran) -> ProviderError:
    if ran.code < 0:
        try:
            how = f"was killed by {signal.Signals(-ran.code).name}"
        except ValueError:
            how = f"was killed by signal {-ran.code}"
    else:
        how = f"exited with status {ran.code}"
    return ProviderError(f"the {what} command {how}", ran.stderr)


def _shown(line: str) -> str:
    return repr(line[:80]) + ("…" if len(line) > 80 else "")


def instance_id_of(stdout: str, stderr: str = "") -> str:
    """The instance id a launch command printed as its last line of stdout; a ProviderError
    that says what it printed instead."""
    lines = stdout.splitlines()
    last = lines[-1].strip() if lines else ""
    if not lines:
        why = "printed nothing on stdout"
    elif not last:
        why = "printed an empty last line"
    elif len(last) > MAX_INSTANCE_ID:
        why = f"printed a last line of {len(last)} characters, over {MAX_INSTANCE_ID}"
    elif not INSTANCE_ID.fullmatch(last):
        why = f"printed {_shown(last)} as its last line, which is not an instance id"
    else:
        return last
    raise ProviderError(
        f"the launch command {why}: print the instance id ({ID_RULE}) alone as the last line "
        "of stdout, and anything else on stderr",
        stderr,
    )


class CommandProvider:
    """One pool's `command` provider (its argvs, its name, the call timeout)."""

    def __init__(self, config: pools.CommandProvider, pool: str, timeout_s: float) -> None:
        self.config = config
        self.pool = pool
        self.timeout_s = timeout_s

    def _env(self, **more: str) -> dict[str, str]:
        return {**inherited_environment(), "GPUFLEET_POOL": self.pool, **more}

    def launch(self, worker: WorkerLaunch) -> Launched:
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        ran = run(
            self.config.launch,
            self._env(**worker.environment()),
            self.timeout_s,
            what="launch",
            cwd=worker.work_dir,
            secret=worker.token,
        )
        if ran.code != 0:
            raise _failed("launch", ran)
        return Launched(instance_id_of(ran.stdout, ran.stderr), ran.stderr)

    def terminate(self, instance_id: str) -> None:
        env = self._env(GPUFLEET_INSTANCE_ID=instance_id)
        ran = run(self.config.terminate, env, self.timeout_s, what="terminate")
        if ran.code != 0:
            raise _failed("terminate", ran)

    def list(self) -> list[str]:
        if self.config.listing is None:
            return []
        env = self._env()
        ran = run(self.config.listing, env, self.timeout_s, what="list", stdout_read=LIST_READ)
        if ran.code != 0:
            raise _failed("list", ran)
        listed = [line.strip() for line in ran.stdout.splitlines() if line.strip()]
        if len(listed) > MAX_LISTED or ran.stdout_size > LIST_READ:
            raise ProviderError(
                f"the list command printed over {MAX_LISTED} lines or {LIST_READ} bytes: "
                "print only this pool's instance ids (GPUFLEET_POOL), one a line",
                ran.stderr,
            )
        for line in listed:
            if not INSTANCE_ID.fullmatch(line):
                raise ProviderError(
                    f"the list command printed {_shown(line)}, which is not an instance id: "
                    f"print the ids alone ({ID_RULE}), one a line",
                    ran.stderr,
                )
        return listed
