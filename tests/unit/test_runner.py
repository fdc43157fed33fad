"""The job runner against real subprocesses: environment, exit codes, process groups."""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpufleet.worker.job import JobSpec, job_environment, prepare_workspace
from gpufleet.worker.runner import JobProcess, LaunchError, Outcome, run_to_end
from tests.waiting import wait_until_async

PY = sys.executable


class Collected:
    """An output sink that can be awaited for a line."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self._waiters: list[tuple[str, asyncio.Event]] = []

    def __call__(self, stream: str, text: str) -> None:
        self.lines.append((stream, text))
        for needle, event in self._waiters:
            if needle in text:
                event.set()

    async def wait_for(self, needle: str, within: float = 10) -> None:
        if any(needle in text for _, text in self.lines):
            return
        event = asyncio.Event()
        self._waiters.append((needle, event))
        await asyncio.wait_for(event.wait(), within)

    def text(self, stream: str | None = None) -> list[str]:
        return [text for s, text in self.lines if stream in (None, s)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or before the read
        return False


async def gone(pid: int, within: float = 5) -> bool:
    return await wait_until_async(
        lambda: not alive(pid), timeout=within, message=f"process {pid} to end", interval=0.02
    )


async def start(code: str, sink: Collected, cwd: Path) -> JobProcess:
    return await JobProcess.start(
        [PY, "-u", "-c", code], cwd=cwd, env=dict(os.environ), on_line=sink
    )


async def test_a_job_runs_in_its_folder_with_the_worker_decided_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GPUFLEET_WORKER_TOKEN", "wt_secret")
    spec = JobSpec.from_event(
        {
            "type": "job_submit",
            "job_id": "j_1",
            "attempt_id": "a_2",
            "config": {"lr": 0.1},
            "gpu_count": 2,
            "timeout_s": None,
            "command": [
                PY,
                "-c",
                "import json, os; print(json.dumps({**os.environ, 'cwd': os.getcwd()}))",
            ],
            "env": {"MY_SETTING": "on", "CUDA_VISIBLE_DEVICES": "7"},
        }
    )
    space = prepare_workspace(tmp_path / "work", spec)
    sink = Collected()
    process = await JobProcess.start(
        spec.argv, cwd=space.folder, env=job_environment(spec, space, [1, 3]), on_line=sink
    )

    assert await process.wait() == 0
    env = json.loads(sink.text("stdout")[0])
    folder = tmp_path / "work" / "jobs" / "j_1" / "a_2"
    assert env["cwd"] == str(folder)
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"  # the worker's choice beats the job's
    assert env["MY_SETTING"] == "on"
    assert env["GPUFLEET_JOB_ID"] == "j_1" and env["GPUFLEET_ATTEMPT_ID"] == "a_2"
    assert env["CONFIG_PATH"] == str(folder / "config.json")
    assert json.loads((folder / "config.json").read_text()) == {"lr": 0.1}
    assert env["GPUFLEET_PROGRESS_FILE"] == str(folder / "progress.jsonl")
    assert "GPUFLEET_WORKER_TOKEN" not in env
    assert env["PATH"].split(os.pathsep)[0] == str(Path(PY).parent)


def test_a_cpu_only_job_sees_no_gpu_and_a_null_command_runs_simpletuner(tmp_path: Path):
    spec = JobSpec.from_event({"job_id": "j_9", "attempt_id": "a_1", "config": {"x": 1}})
    space = prepare_workspace(tmp_path, spec)

    env = job_environment(spec, space, [], base={"PATH": "/bin"})

    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert spec.argv == (PY, "-m", "simpletuner.train")


async def test_exit_code_zero_completes(tmp_path: Path):
    process = await start("print('done')", Collected(), tmp_path)

    result = await run_to_end(
        process, timeout_s=10, stop=asyncio.Event(), grace=1, stop_reason=lambda: "stopped"
    )

    assert (result.outcome, result.exit_code, result.error) == (Outcome.COMPLETED, 0, None)


async def test_a_non_zero_exit_fails_with_the_code_and_the_last_twenty_lines(tmp_path: Path):
    code = (
        "import sys\n"
        "for i in range(30): print(f'line {i}')\n"
        "print('boom', file=sys.stderr)\n"
        "sys.exit(3)"
    )
    process = await start(code, Collected(), tmp_path)

    result = await run_to_end(
        process, timeout_s=10, stop=asyncio.Event(), grace=1, stop_reason=lambda: "stopped"
    )

    assert result.outcome is Outcome.FAILED and result.exit_code == 3
    assert result.error is not None
    first, *tail = result.error.splitlines()
    assert first.startswith("exited with code 3")
    assert tail[-1] == "boom" and tail[0] == "line 11" and len(tail) == 20


async def test_cancel_terminates_the_whole_process_group(tmp_path: Path):
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    sink = Collected()
    process = await start(code, sink, tmp_path)
    await sink.wait_for("child ")
    child = int(sink.text()[0].split()[1])
    stop = asyncio.Event()
    stop.set()

    result = await run_to_end(
        process,
        timeout_s=30,
        stop=stop,
        grace=5,
        stop_reason=lambda: "cancelled by the orchestrator",
    )

    assert result.outcome is Outcome.CANCELLED
    assert result.error == "cancelled by the orchestrator"
    assert result.exit_code == -15
    assert await gone(child), "the job's child survived the cancel"


async def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path):
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    sink = Collected()
    process = await start(code, sink, tmp_path)
    await sink.wait_for("ready")
    stop = asyncio.Event()
    stop.set()
    began = time.monotonic()

    result = await run_to_end(
        process, timeout_s=30, stop=stop, grace=0.5, stop_reason=lambda: "cancelled"
    )

    assert result.outcome is Outcome.CANCELLED
    assert result.exit_code == -9
    assert 0.5 <= time.monotonic() - began < 5
    assert "ignoring SIGTERM" in sink.text()


async def test_a_job_past_its_timeout_is_stopped_and_fails(tmp_path: Path):
    process = await start("import time; print('start'); time.sleep(60)", Collected(), tmp_path)

    result = await run_to_end(
        process, timeout_s=0.3, stop=asyncio.Event(), grace=2, stop_reason=lambda: "cancelled"
    )

    assert result.outcome is Outcome.FAILED
    assert result.error is not None and result.error.startswith("timed out after 0.3 s")
    assert "start" in result.error


async def test_what_the_job_leaves_in_its_group_dies_with_it(tmp_path: Path):
    code = (
        "import subprocess\n"
        f"child = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('child', child.pid)\n"
    )
    sink = Collected()
    process = await start(code, sink, tmp_path)

    assert await asyncio.wait_for(process.wait(), 10) == 0
    assert await gone(int(sink.text()[0].split()[1]))


async def test_a_missing_executable_is_a_launch_error(tmp_path: Path):
    with pytest.raises(LaunchError, match="could not start 'no-such-trainer-gpufleet'"):
        await JobProcess.start(
            ["no-such-trainer-gpufleet"], cwd=tmp_path, env=dict(os.environ), on_line=Collected()
        )


async def test_output_lines_are_split_by_stream_with_redraws_and_huge_lines_handled(
    tmp_path: Path,
):
    code = (
        "import sys\n"
        "sys.stdout.write('a\\nprogress 10%\\rprogress 100%\\r\\n' + 'x' * 70000 + '\\nlast')\n"
        "sys.stderr.write('err line\\n')\n"
    )
    sink = Collected()
    process = await start(code, sink, tmp_path)
    await process.wait()

    out = sink.text("stdout")
    assert out[:2] == ["a", "progress 100%"]
    assert [len(line) for line in out[2:4]] == [65536, 70000 - 65536]
    assert out[-1] == "last"
    assert sink.text("stderr") == ["err line"]


async def test_the_error_of_a_job_printing_huge_lines_stays_within_what_is_stored(
    tmp_path: Path,
):
    """Twenty lines of 60 KB in the error would be refused by the orchestrator (over 100,000
    characters) and the job's end never recorded (#14)."""
    code = "import sys\nfor i in range(25): print(str(i) * 60_000)\nsys.exit(2)"
    process = await start(code, Collected(), tmp_path)

    result = await run_to_end(
        process, timeout_s=10, stop=asyncio.Event(), grace=1, stop_reason=lambda: "stopped"
    )

    assert result.outcome is Outcome.FAILED and result.error is not None
    assert result.error.startswith("exited with code 2; last output:\n…")
    assert len(result.error) < 20_000 and result.error.endswith("24" * 100)
