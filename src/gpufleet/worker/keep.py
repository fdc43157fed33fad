"""What a job keeps: the files uploaded as artifacts and the folders uploaded as checkpoints.

The job config names them (docs/artifacts.md): `artifacts`, globs relative to the job folder
(default `output/**` and `result.json`; a SimpleTuner config's `output_dir`), and `checkpoints`,
a glob of checkpoint folders (default none; SimpleTuner: `<output_dir>/checkpoint-*`).

Globs are POSIX, relative to the job folder: `*` and `?` stay within a name, `**` spans any
number of folders, and a pattern naming a folder keeps everything under it. Nothing here
follows a symbolic link: a link is kept only when it points at a file inside the job folder
(its target's bytes are uploaded), never one that leads out of it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from gpufleet.errors import AgentError

log = logging.getLogger(__name__)

DEFAULT_ARTIFACTS = ("output/**", "result.json")
_MAX_GLOBS = 100
_MAX_GLOB_CHARS = 1024


class BadKeepRule(AgentError):
    """A job config's `artifacts` or `checkpoints` the worker refuses to follow."""


@dataclass(frozen=True)
class KeepRules:
    artifacts: tuple[str, ...] = DEFAULT_ARTIFACTS
    checkpoints: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, simpletuner: bool) -> KeepRules:
        """The rules a job config names, checked; `BadKeepRule` naming the key otherwise."""
        artifacts: tuple[str, ...] = DEFAULT_ARTIFACTS
        checkpoints: tuple[str, ...] = ()
        output_dir = config.get("output_dir") if simpletuner else None
        if isinstance(output_dir, str) and output_dir and not _glob_problem(output_dir):
            output_dir = output_dir.removeprefix("./").rstrip("/")
            artifacts = (output_dir,)
            checkpoints = (f"{output_dir}/checkpoint-*",)
        elif output_dir not in (None, ""):
            # The trainer's own setting, valid for it: the job runs, its outputs stay put.
            log.warning(
                "output_dir %r is not a folder inside the job folder: its files are not "
                "uploaded; give a relative output_dir to keep them",
                output_dir,
            )
        if config.get("artifacts") is not None:
            artifacts = _globs("artifacts", config["artifacts"])
        if config.get("checkpoints") is not None:
            checkpoints = _globs("checkpoints", config["checkpoints"])
        return cls(artifacts, checkpoints)


def artifact_files(folder: Path, rules: KeepRules) -> list[str]:
    """The files to upload as artifacts: relative POSIX paths, sorted."""
    patterns = [_compile(glob) for glob in rules.artifacts]
    return sorted(path for path in _files(folder) if any(p.fullmatch(path) for p in patterns))


def checkpoint_folders(folder: Path, rules: KeepRules) -> list[str]:
    """The folders matching the `checkpoints` globs (relative POSIX paths), sorted. Only the
    part of the tree a glob can match is walked (`output/checkpoint-*`: `output/`)."""
    found = set()
    for glob in rules.checkpoints:
        pattern = _compile(glob, contents=False)
        start = folder / _fixed_prefix(glob)
        for root, dirs, _ in os.walk(start):  # os.walk does not descend into linked folders
            for name in dirs:
                full = Path(root, name)
                relative = full.relative_to(folder).as_posix()
                if not full.is_symlink() and pattern.fullmatch(relative):
                    found.add(relative)
    return sorted(found)


def folder_files(folder: Path, relative: str) -> list[str]:
    """Every file under `folder/relative`, as paths relative to `folder`, sorted."""
    return sorted(_files(folder, relative))


def inside(folder: Path, path: str) -> str | None:
    """`path` (relative to `folder`, or absolute) as a clean relative POSIX path if it lies
    inside `folder` once links are resolved, else None."""
    if not path or "\0" in path:
        return None
    base = folder.resolve()
    try:
        resolved = (base / path).resolve()
        relative = resolved.relative_to(base)
    except (OSError, ValueError, RuntimeError):
        return None
    text = relative.as_posix()
    return None if text == "." else text


def open_inside(folder: Path, path: Path) -> BinaryIO:
    """`path` opened for reading, if what was opened is a regular file inside `folder`.

    The worker (root, with `--run-as`) reads files its job can change while it reads them:
    a link swapped in after `inside` checked the path would lead it to a file only the
    worker may read. So the check is made again on the file actually open (Linux names it
    in /proc/self/fd); a FIFO is not waited on. OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        try:
            opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # no /proc: the check `inside` made stands
            opened = None
        if opened is not None and not opened.is_relative_to(folder.resolve()):
            raise PermissionError(f"{path} leads out of the job folder")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _files(folder: Path, under: str = "") -> Iterable[str]:
    """The job folder's regular files (those `under` a folder of it), links to files inside
    it included, never leaving it."""
    base = folder.resolve()
    for root, _, files in os.walk(base / under):
        for name in files:
            full = Path(root, name)
            relative = full.relative_to(base).as_posix()
            if full.is_symlink() and inside(base, relative) is None:
                continue  # a link leading out of the job folder: never uploaded
            if full.is_file():
                yield relative


def _globs(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadKeepRule(f"{key} must be a list of glob strings, got {value!r:.200}")
    if len(value) > _MAX_GLOBS:
        raise BadKeepRule(f"{key} holds {len(value)} globs; give at most {_MAX_GLOBS}")
    return tuple(_glob(key, item) for item in value)


def _fixed_prefix(glob: str) -> str:
    """The folders a glob names before its first wildcard: where a walk for it starts."""
    fixed = []
    for part in glob.split("/")[:-1]:
        if any(char in part for char in "*?"):
            break
        fixed.append(part)
    return "/".join(fixed)


def _glob(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BadKeepRule(f"{key} must be a string, got {value!r:.200}")
    problem = _glob_problem(value)
    if problem:
        raise BadKeepRule(
            f"{key} {value[:200]!r} is refused: {problem}; give a path relative to the job "
            "folder, like 'output/**'"
        )
    return value.removeprefix("./")


def _glob_problem(glob: str) -> str | None:
    if not glob.strip():
        return "it is empty"
    if len(glob) > _MAX_GLOB_CHARS:
        return f"it is over {_MAX_GLOB_CHARS} characters"
    if "\0" in glob:
        return "it holds a NUL character"
    if "\\" in glob:
        return "it holds a backslash"
    if glob.startswith(("/", "~")) or PurePosixPath(glob).is_absolute():
        return "it is absolute"
    if ".." in glob.split("/"):
        return "it climbs out of the job folder with '..'"
    return None


def _compile(glob: str, *, contents: bool = True) -> re.Pattern[str]:
    """A POSIX glob as a regex on relative paths; with `contents`, a folder it names matches
    everything under it."""
    parts = [part for part in glob.removeprefix("./").split("/") if part not in ("", ".")]
    pieces = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
            continue
        pieces.append(_segment(part) + ("" if last else "/"))
    pattern = "".join(pieces)
    if contents and parts and parts[-1] != "**":
        pattern += "(?:/.*)?"  # a folder named by the glob keeps everything under it
    return re.compile(pattern, re.DOTALL)


def _segment(part: str) -> str:
    out = []
    for char in part:
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(char))
    return "".join(out)
