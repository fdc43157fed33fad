"""`--run-as USER`: jobs run as another OS user than the worker's.

The worker stays as it was started (root, which alone may switch users); each job's process
is started as the user, with the user's groups (`subprocess`'s `user`, `group`,
`extra_groups`), in an attempt folder given to that user. What is the worker's own stays
closed to it: the work folder and each job's folder above the attempt are 0711 (entered,
never listed), /proc/<worker>/environ belongs to another user, and the token file is the
operator's to keep 0600 (docs/deploy.md).
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import AgentError, ConfigurationError

_CLOSED = 0o711  # others may enter, not list


@dataclass(frozen=True, slots=True)
class JobUser:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def resolve(cls, name: str) -> JobUser:
        """The user, checked: it exists, and this worker may switch to it (it is root)."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise ConfigurationError(
                f"--run-as {name}: no such user on this machine; create it (useradd --system "
                f"--no-create-home {name}) or name another"
            ) from None
        if os.geteuid() != 0:
            raise ConfigurationError(
                f"--run-as {name}: the worker runs as uid {os.geteuid()}, and only root can "
                "start jobs as another user; start the worker as root, or without --run-as"
            )
        if entry.pw_uid == 0:
            raise ConfigurationError(
                f"--run-as {name}: that is root; name an unprivileged user for the jobs"
            )
        groups = tuple(g for g in os.getgrouplist(name, entry.pw_gid) if g != entry.pw_gid)
        return cls(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)

    @property
    def group_name(self) -> str:
        try:
            return grp.getgrgid(self.gid).gr_name
        except KeyError:
            return str(self.gid)

    def environment(self) -> dict[str, str]:
        """What a login as the user would set; the job's own `env` may still override."""
        return {"USER": self.name, "LOGNAME": self.name, "HOME": self.home}

    def close_work_dir(self, work_dir: Path) -> None:
        """The work folder, made: entered by the user on its way to a job, never listed."""
        try:
            (work_dir / "jobs").mkdir(parents=True, exist_ok=True)
            for folder in (work_dir, work_dir / "jobs"):
                folder.chmod(_CLOSED)
        except OSError as exc:
            raise ConfigurationError(f"--work-dir {work_dir}: {exc}") from exc
        for parent in work_dir.parents:
            if not parent.stat().st_mode & 0o001:
                raise ConfigurationError(
                    f"--run-as {self.name}: the user cannot enter {parent}, above --work-dir "
                    f"{work_dir}; choose a --work-dir such as /var/lib/gpufleet/worker"
                )

    def hand_over(self, attempt_folder: Path) -> None:
        """Give the attempt's folder, and whatever the worker put in it, to the user; close
        the job's folder above it."""
        try:
            attempt_folder.parent.chmod(_CLOSED)
            for root, dirs, files in os.walk(attempt_folder):
                for name in (*dirs, *files):
                    os.chown(Path(root) / name, self.uid, self.gid, follow_symlinks=False)
            os.chown(attempt_folder, self.uid, self.gid, follow_symlinks=False)
            attempt_folder.chmod(0o700)
        except OSError as exc:
            raise AgentError(
                f"cannot give the job folder {attempt_folder} to {self.name}: {exc}"
            ) from exc
