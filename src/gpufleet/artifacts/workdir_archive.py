"""A job's workdir as one canonical tar (docs/jobs.md): the same tree gives the same bytes,
so the same sha256, whatever its files' times, owners or the machine that packed it.

Canonical: entries sorted by their UTF-8 path, regular files and symbolic links only (the
folders are implied by the paths), mtimes, uids and gids zero, no user or group names, a
file's mode 0644 or 0755 (executable by anyone when its owner could), links 0777; POSIX
(PAX) headers, no compression (a gzip stream's bytes depend on the zlib that made it).

The same rules guard both ends. Packing refuses what it would not unpack; `check` reads an
archive someone else made (the orchestrator at upload, the worker before it extracts) and
refuses a path outside the folder, an absolute path, a link leading out or a path through a
link, a device file, a hard link, a NUL or newline (any control character) in a name, a name
twice, and more unpacked bytes than the archive carries (an archive bomb: a tar member's
bytes are in the archive, so a member larger than what is left of it is a lie).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpufleet.errors import UnsafeArchive

WORKDIR_PREFIX = "sha256:"
MAX_NAME_BYTES = 4096  # PATH_MAX on Linux
MAX_ENTRIES = 500_000
_CHUNK = 1024 * 1024
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    size: int  # 0 for a link
    mode: int
    link: str | None = None  # a symbolic link's target, relative to the link's folder


@dataclass(frozen=True, slots=True)
class Packed:
    size: int
    sha256: str
    entries: tuple[Entry, ...]

    @property
    def digest(self) -> str:
        return f"{WORKDIR_PREFIX}{self.sha256}"


def name_problem(path: str) -> str | None:
    """Why `path` cannot name a file inside the workdir; None when it can."""
    if not path:
        return "it is empty"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "it holds a control character (NUL, newline, …)"
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if len(encoded) > MAX_NAME_BYTES:
        return f"it is over {MAX_NAME_BYTES} bytes"
    if path.startswith("/"):
        return "it is absolute"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "it has an empty, '.' or '..' part"
    return None


def link_problem(path: str, target: str) -> str | None:
    """Why a link at `path` to `target` could lead out of the folder; None when it cannot."""
    if not target or any(ord(c) < 0x20 for c in target):
        return "its target is empty or holds a control character"
    if target.startswith("/"):
        return f"it points to the absolute path {target[:80]!r}"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"it points out of the folder ({target[:80]!r})"
    return None


def _refuse(path: str, problem: str, where: str) -> UnsafeArchive:
    return UnsafeArchive(f"{where}: {path[:120]!r} is refused: {problem}")


# ---- pack ---------------------------------------------------------------------------------


def entry_of(root: Path, path: str) -> Entry:
    """What `root/path` packs as; `UnsafeArchive` for what no workdir may hold."""
    if problem := name_problem(path):
        raise _refuse(path, problem, "the workdir")
    info = os.lstat(root / path)
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(root / path)
        if problem := link_problem(path, target):
            raise _refuse(path, f"a link: {problem}", "the workdir")
        return Entry(path, 0, 0o777, target)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(
            path, "it is not a regular file or a link (a device, pipe or socket)", "the workdir"
        )
    return Entry(path, info.st_size, 0o755 if info.st_mode & stat.S_IXUSR else 0o644)


def _header(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = entry.mode, 0, 0, 0, "", ""
    if entry.link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, entry.link
    else:
        info.size = entry.size
    return info


def entries_of(root: Path, paths: Iterable[str]) -> list[Entry]:
    """What `paths` (relative to `root`) pack as, in the archive's order."""
    return sorted((entry_of(root, p) for p in set(paths)), key=lambda e: e.path.encode())


def archive_size(entries: Iterable[Entry]) -> int:
    """The bytes of the canonical archive of `entries`, as `chunks` makes it."""
    size = sum(len(_encoded(entry)) + _padded(entry.size) for entry in entries) + _END
    return size + (-size % tarfile.RECORDSIZE)


def chunks(root: Path, entries: Iterable[Entry]) -> Iterator[bytes]:
    """The canonical tar of `entries` (from `entries_of`), in pieces of at most a MiB: the
    bytes `tarfile` writes for them (a header each, a file's bytes padded to a block, two
    zero blocks, zeros to a whole record). `UnsafeArchive` if a file's size changed since
    its entry was read (its header would lie)."""
    size = 0
    for entry in entries:
        header = _encoded(entry)
        size += len(header)
        yield header
        if entry.link is not None:
            continue
        with _opened(root, entry.path) as source:
            left = entry.size
            while left > 0 and (chunk := source.read(min(_CHUNK, left))):
                left -= len(chunk)
                yield chunk
            if left or source.read(1):
                raise UnsafeArchive(
                    f"the workdir's file {entry.path[:120]!r} changed size while it was packed; "
                    "run again once nothing writes to the folder"
                )
        size += entry.size
        if pad := _padded(entry.size) - entry.size:
            size += pad
            yield bytes(pad)
    size += _END
    yield bytes(_END + (-size % tarfile.RECORDSIZE))


def pack(root: Path, paths: Iterable[str], out: IO[bytes]) -> Packed:
    """Write the canonical tar of `paths` (relative to `root`) to `out`."""
    entries = entries_of(root, paths)
    sha, size = hashlib.sha256(), 0
    for chunk in chunks(root, entries):
        sha.update(chunk)
        size += len(chunk)
        out.write(chunk)
    return Packed(size, sha.hexdigest(), tuple(entries))


_END = 2 * tarfile.BLOCKSIZE


def _opened(root: Path, path: str) -> IO[bytes]:
    try:
        return (root / path).open("rb")
    except OSError as exc:
        raise UnsafeArchive(
            f"the workdir's file {path[:120]!r} cannot be read ({exc.strerror}); run again once "
            "nothing writes to the folder"
        ) from exc


def _encoded(entry: Entry) -> bytes:
    return _header(entry).tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


def _padded(size: int) -> int:
    return size + (-size % tarfile.BLOCKSIZE)


# ---- check and unpack ---------------------------------------------------------------------


def check(archive: IO[bytes], packed_size: int) -> list[Entry]:
    """The entries of a workdir archive someone else made; `UnsafeArchive` if it holds
    anything `unpack` must not write."""
    entries: list[Entry] = []
    seen: set[str] = set()
    links: set[str] = set()
    unpacked = 0
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            for member in tar:
                entry = _checked_member(member, links)
                if entry.path in seen:
                    raise _refuse(entry.path, "it is in the archive twice", "the archive")
                seen.add(entry.path)
                unpacked += entry.size
                if unpacked > packed_size or len(entries) >= MAX_ENTRIES:
                    raise UnsafeArchive(
                        f"the archive unpacks to more than its {packed_size} bytes or "
                        f"{MAX_ENTRIES} entries (an archive bomb); pack the folder with "
                        "`gpufleet run`"
                    )
                entries.append(entry)
    except tarfile.TarError as exc:
        raise UnsafeArchive(
            f"the archive is not a plain tar ({exc}); pack the folder with `gpufleet run`"
        ) from exc
    return entries


def _checked_member(member: tarfile.TarInfo, links: set[str]) -> Entry:
    path = member.name.removesuffix("/") if member.isdir() else member.name
    if problem := name_problem(path):
        raise _refuse(path, problem, "the archive")
    parents = path.split("/")[:-1]
    for depth in range(1, len(parents) + 1):
        if "/".join(parents[:depth]) in links:
            raise _refuse(path, "it lies under a link of the archive", "the archive")
    if member.issym():
        if problem := link_problem(path, member.linkname):
            raise _refuse(path, f"a link: {problem}", "the archive")
        links.add(path)
        return Entry(path, 0, 0o777, member.linkname)
    if member.isdir():
        return Entry(path, 0, 0o755)
    if member.type not in _FILE_TYPES or member.sparse is not None:
        raise _refuse(path, "it is not a regular file, a folder or a link", "the archive")
    return Entry(path, member.size, 0o755 if member.mode & 0o100 else 0o644)


def unpack(archive: Path, dest: Path) -> list[Entry]:
    """Check `archive`, then write its files into `dest` (made if missing; nothing in it
    may be replaced: an existing name is refused). Files get the current time."""
    size = archive.stat().st_size
    with archive.open("rb") as source:
        entries = check(source, size)
    dest.mkdir(parents=True, exist_ok=True)
    with archive.open("rb") as source, tarfile.open(fileobj=source, mode="r:") as tar:
        for member, entry in zip(tar, entries, strict=True):
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if entry.link is not None:
                os.symlink(entry.link, target)
            elif member.isdir():
                target.mkdir(exist_ok=True)
            else:
                _write(source.fileno(), member, target, entry.mode)
    return entries


def _write(archive: int, member: tarfile.TarInfo, target: Path, mode: int) -> None:
    """Copy a member's bytes from the archive's file into a new file, in the kernel where it
    can (`check` made sure the member is a regular file whose bytes are in the archive)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    out = os.open(target, flags, mode)
    try:
        _copy_range(archive, out, member.offset_data, member.size)
        os.fchmod(out, mode)
    finally:
        os.close(out)


def _copy_range(source: int, out: int, offset: int, size: int) -> None:
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < size:
                copied = os.copy_file_range(source, out, size - done, offset + done)
                if copied == 0:
                    break
                done += copied
        except OSError:  # another file system, or a kernel without it: copy in Python
            pass
    while done < size:
        chunk = os.pread(source, min(_CHUNK, size - done), offset + done)
        if not chunk:
            raise UnsafeArchive(f"the archive ends inside a file's bytes (at {offset + done})")
        done += os.write(out, chunk)
