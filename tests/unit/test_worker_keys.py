"""What the worker drops before starting itself again without its token (worker/keys.py);
tests/e2e/test_worker_keys.py reads /proc of real workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpufleet.errors import ConfigurationError
from gpufleet.worker import keys
from gpufleet.worker.jobuser import JobUser


def test_the_token_option_is_dropped_in_both_spellings_and_nothing_else() -> None:
    argv = ["gpufleet", "worker", "--worker-token", "wt_a", "--name", "n", "--worker-token=wt_b"]
    assert keys.without_token(argv) == ["gpufleet", "worker", "--name", "n"]
    kept = ["worker", "--worker-token-file", "/etc/t", "--name", "wt_x"]
    assert keys.without_token(kept) == kept


def test_the_token_variables_leave_the_environment_and_the_rest_stays() -> None:
    env = {"GPUFLEET_WORKER_TOKEN": "a", "SIMPLETUNER_WORKER_TOKEN": "b", "PATH": "/bin"}
    assert keys.scrubbed_environ(env) == {"PATH": "/bin"}


def test_a_token_passed_through_the_pipe_is_read_once_and_the_pipe_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"wt_secret")
    os.close(write_end)
    monkeypatch.setenv(keys.INHERITED_FD_VAR, str(read_end))
    assert keys.inherited_token() == "wt_secret"
    assert keys.INHERITED_FD_VAR not in os.environ
    with pytest.raises(OSError):
        os.fstat(read_end)
    assert keys.inherited_token() is None


def test_a_token_set_after_start_is_not_shown_in_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_WORKER_TOKEN", "wt_set_after_start")
    assert not keys.shown_in_proc("wt_set_after_start")  # no restart under a test runner


def test_run_as_a_user_that_does_not_exist_is_refused_saying_so() -> None:
    with pytest.raises(ConfigurationError, match="no such user"):
        JobUser.resolve("no-such-user-x9")


def test_run_as_root_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="root"):
        JobUser.resolve("root")


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_DUMPABLE is Linux's")
def test_the_worker_process_is_made_non_dumpable() -> None:
    probe = (
        "import ctypes; from gpufleet.worker.keys import make_undumpable; "
        "get = lambda: ctypes.CDLL(None).prctl(3, 0, 0, 0, 0); "  # PR_GET_DUMPABLE
        "before = get(); make_undumpable(); print(before, get())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "0"]


def test_run_as_from_a_worker_that_is_not_root_is_refused_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the fault: a worker started unprivileged
    with pytest.raises(ConfigurationError, match="only root can start jobs as another user"):
        JobUser.resolve("nobody")
