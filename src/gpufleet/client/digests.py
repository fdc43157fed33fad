"""What `gpufleet run` remembers of the folders it packed (docs/jobs.md): the digest of a
folder's canonical archive, beside each file's path, size, mtime, ctime, inode, mode and
link target when it was packed, so that a folder nothing changed in is not read again to
learn its digest (packing 100 MB is most of a warm run's cost).

A file added, removed or changed in any of those (an editor's save, a `touch`, a `chmod`, a
rename over it) packs the folder again; the digest is always that of the canonical archive,
whatever was remembered. Packing is remembered only when the folder's stat is the same after
it as before, and no file was modified in the last `RACY_NS` before it was read (a write
later in the same tick of the file system's clock would leave its stat as it was).

One small JSON file a folder in `$GPUFLEET_CACHE_DIR`, else `$XDG_CACHE_HOME/gpufleet`, else
`~/.cache/gpufleet`, under `workdirs/`; one that cannot be read or written is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufleet.artifacts.workdir_archive import WORKDIR_PREFIX

FORMAT = 1  # the canonical archive's rules: a new version forgets every digest remembered
RACY_NS = 100_000_000  # far above a local file system's timestamp tick (4-10 ms)
_Row = list[str | int | None]


@dataclass(frozen=True, slots=True)
class Known:
    sha256: str
    size: int

    @property
    def digest(self) -> str:
        return f"{WORKDIR_PREFIX}{self.sha256}"


def cache_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the digests are kept (the module's docstring says which variable wins)."""
    if mine := environ.get("GPUFLEET_CACHE_DIR"):
        return Path(mine)
    if xdg := environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "gpufleet"
    return Path.home() / ".cache" / "gpufleet"


@dataclass(frozen=True, slots=True)
class Signature:
    rows: list[_Row]  # a file's path, size, mtime, ctime, inode, device, mode, link target
    read_ns: int  # when it was read (the clock of file times)


def signature(root: Path, paths: list[str]) -> Signature:
    """Each file's stat as far as the digest could depend on it, in the order of `paths`."""
    read_ns = time.time_ns()
    rows: list[_Row] = []
    for path in paths:
        info = os.lstat(root / path)
        link = os.readlink(root / path) if stat.S_ISLNK(info.st_mode) else None
        rows.append(
            [
                path,
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
                info.st_ino,
                info.st_dev,
                info.st_mode,
                link,
            ]
        )
    return Signature(rows, read_ns)


class DigestCache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder / "workdirs"

    def _file(self, root: Path) -> Path:
        return self.folder / f"{hashlib.sha256(str(root).encode()).hexdigest()}.json"

    def lookup(self, root: Path, now: Signature) -> Known | None:
        """The digest remembered for `root` when its files' stat is `now`'s exactly."""
        try:
            kept = json.loads(self._file(root).read_text())
            if (kept["format"], kept["root"], kept["files"]) == (FORMAT, str(root), now.rows):
                return Known(str(kept["sha256"]), int(kept["size"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def remember(self, root: Path, before: Signature, packed: Known, after: Signature) -> None:
        """Keep `packed`'s digest for `root` if no file changed while or just before it was
        packed (`before` and `after`: the stat read before packing, and after)."""
        if before.rows != after.rows or _racy(before):
            return
        kept = {
            "format": FORMAT,
            "root": str(root),
            "sha256": packed.sha256,
            "size": packed.size,
            "files": before.rows,
        }
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self.folder, prefix=".digest-")
            try:
                with os.fdopen(fd, "w") as out:
                    json.dump(kept, out)
                os.replace(name, self._file(root))
            finally:
                Path(name).unlink(missing_ok=True)


def _racy(read: Signature) -> bool:
    """Whether a file had changed so lately when its stat was read that a write in the same
    tick of the file system's clock could have followed unseen."""
    since = read.read_ns - RACY_NS  # a later write's mtime differs from an older one
    return any(int(row[2] or 0) > since for row in read.rows)
