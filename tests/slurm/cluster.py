"""A real single-node Slurm cluster for the tests: Debian's munged, slurmctld and slurmd
(`make system-packages` installs them), each in the foreground, everything under one temporary
folder, stopped at the end.

munged runs with a key, socket and state of its own (`AuthInfo=socket=` points Slurm at it);
slurmctld and slurmd listen on free ports; the node has this machine's CPUs and two fake GPUs
(`Gres=gpu:2`, gres.conf naming two device files), so `--gres=gpu:N` is scheduled as on a GPU
cluster. Clients find the cluster by `SLURM_CONF` (`Cluster.env`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tests.e2e.conftest import free_port
from tests.waiting import wait_until

PARTITION = "gpu"
DOWN_PARTITION = "down"  # takes jobs, starts none: they wait (PartitionDown)
FAKE_GPUS = 2
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
STOP_GRACE_S = 10.0


def missing_programs() -> list[str]:
    """Slurm's and munge's programs not installed here (daemons live in /usr/sbin)."""
    return [
        p for p in (*DAEMONS, *CLIENTS) if not (shutil.which(p) or Path("/usr/sbin", p).exists())
    ]


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


# SchedulerParameters: slurmctld holds a new batch job up to `batch_sched_delay` (3 s by
# default) before its scheduler looks at it; at 0 a job starts at the scheduler's next tick
# (about a second): every launch in the tier 2 s sooner (#32).
def _conf(root: Path, host: str, munge_socket: Path) -> str:
    return f"""\
ClusterName=gpufleet-tests
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "log" / "slurmctld.log"}
SlurmdLogFile={root / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
GresTypes=gpu
ReturnToService=2
MinJobAge=2
KillWait=2
SchedulerParameters=batch_sched_delay=0
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} Gres=gpu:{FAKE_GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName={DOWN_PARTITION} Nodes={host} MaxTime=INFINITE State=DOWN
"""


def _fake_gpus(root: Path) -> str:
    """Device files for gres.conf: character devices like /dev/null where this process may
    make them (slurmd checks), else plain files (slurmd logs an error and counts them)."""
    devices = root / "dev"
    devices.mkdir()
    for i in range(FAKE_GPUS):
        path = devices / f"gpu{i}"
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))
        except OSError:
            path.touch()
    return f"{devices}/gpu[0-{FAKE_GPUS - 1}]"


class Cluster:
    """Start with `start()`, stop with `stop()`; `run` calls a client command against it."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: munged wants every folder above its socket searchable
        # by all, and the socket's path must stay short.
        self.root = Path(tempfile.mkdtemp(prefix="gf-slurm-"))
        self.root.chmod(0o755)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.env: Mapping[str, str] = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for sub in ("state", "spool", "log", "munge"):
            (self.root / sub).mkdir()
        munge = self.root / "munge"
        munge.chmod(0o755)
        secret = self.root / "munge-key"
        secret.mkdir(mode=0o700)
        key = secret / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = munge / "munge.sock"
        self._daemon(
            "munged",
            "-F",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'seed'}",
        )
        wait_until(
            sock.exists, timeout=15, message=f"munged's socket {sock} ({self._log('munged')})"
        )
        self.conf.write_text(_conf(self.root, self.host, sock))
        (self.root / "gres.conf").write_text(
            f"NodeName={self.host} Name=gpu File={_fake_gpus(self.root)}\n"
        )
        self._daemon("slurmctld", "-D", "-f", str(self.conf))
        self._daemon("slurmd", "-D", "-f", str(self.conf))
        wait_until(
            lambda: self.node_state() == "idle",
            timeout=30,
            message=f"the node idle in sinfo ({self._log('slurmctld')}; {self._log('slurmd')})",
        )

    def _daemon(self, name: str, *args: str) -> None:
        with (self.root / "log" / f"{name}.out").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                [_program(name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )

    def _log(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return f"{name} said: {(self.root / 'log' / f'{name}.out').read_text()[-1500:]}"
        return f"{name} said nothing"

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def node_state(self) -> str:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited ({proc.returncode}): {self._log(name)}")
        sinfo = ("sinfo", "--noheader", "--Node", f"--partition={PARTITION}", "--format=%t")
        return self.run(*sinfo, check=False).strip()

    def jobs(self) -> dict[str, str]:
        """Every job not ended: its id → `state|name|gres|comment`."""
        listed = self.run("squeue", "--noheader", "--format=%i|%T|%j|%b|%k")
        return dict(line.split("|", 1) for line in listed.splitlines() if line.strip())

    def stored_environment(self, job: str) -> dict[str, str]:
        """The environment slurmctld keeps for a batch job, in its state folder: a count,
        then NUL-terminated `NAME=value` strings."""
        path = self.root / "state" / f"hash.{int(job) % 10}" / f"job.{job}" / "environment"
        items = path.read_bytes()[4:].decode(errors="replace").split("\0")
        return dict(item.split("=", 1) for item in items if "=" in item)

    def pids(self, job: str) -> list[int]:
        """The processes of a running job (`scontrol listpids`: a header, then a pid a line)."""
        lines = self.run("scontrol", "listpids", job).splitlines()[1:]
        return [int(line.split()[0]) for line in lines if line.strip()]

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (slurmd waits for its jobs' steps)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run("scancel", f"--partition={PARTITION}", check=False)
                wait_until(lambda: not self.jobs(), timeout=20, message="the jobs to end")
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def every_command_line() -> str:
    """Every process's arguments, as `ps` shows them to anyone on this machine."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):  # one that ended while we looked
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return "\n".join(lines)
