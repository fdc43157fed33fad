"""What the jobs of an agent that died left running, killed when an agent starts on its work
folder.

A job's main process dies with its agent (Linux's parent-death signal, runner.py), and its
process group with it when the agent stops it; but not what it started in a session of its
own: `torchrun` starts each rank so. Killed with its agent, such a job leaves its ranks
running, holding GPUs and waiting on peers that are gone. Every process a job starts inherits
its folder (`GPUFLEET_JOB_DIR`, under `<work dir>/jobs/`) and its agent's pid
(`GPUFLEET_AGENT_PID`): one whose agent is gone is left over. Another agent sharing the work
folder (it may: env_cache.py) is alive, and its jobs are left alone; so are the processes of
jobs started before agents named themselves.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

JOB_DIR_ENV = "GPUFLEET_JOB_DIR"
AGENT_PID_ENV = "GPUFLEET_AGENT_PID"
_WAIT_S = 5.0


def leftovers(work_dir: Path) -> list[psutil.Process]:
    """Processes of this machine started by a job of `work_dir` (not this one's ancestors)."""
    jobs = os.path.join(os.path.realpath(work_dir), "jobs") + os.sep
    ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for process in psutil.process_iter():
        if process.pid in ours:
            continue
        try:
            env = process.environ()
            folder, agent = env.get(JOB_DIR_ENV), env.get(AGENT_PID_ENV, "")
            if not (folder and agent.isdigit() and os.path.realpath(folder).startswith(jobs)):
                continue
            if not _alive_before(int(agent), process.create_time()):
                found.append(process)
        except psutil.Error:  # gone, a zombie, or another user's (--run-as without root)
            continue
    return found


def _alive_before(pid: int, started: float) -> bool:
    """Whether process `pid` runs and began before `started` (so it is not a newer process
    that reused the pid of a job's dead agent)."""
    try:
        return bool(psutil.Process(pid).create_time() <= started)
    except psutil.Error:
        return False


def kill_leftovers(work_dir: Path) -> int:
    """SIGKILL what `leftovers` finds and wait for it to go; how many there were."""
    found = leftovers(work_dir)
    for process in found:
        try:
            log.warning(
                "killing pid %s, left running by a job of an earlier agent on %s: %s",
                process.pid,
                work_dir,
                " ".join(process.cmdline())[:200],
            )
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(found, timeout=_WAIT_S)
    return len(found)
