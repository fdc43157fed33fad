"""Artifact keys: where a job's file lives in the store, and the paths we refuse.

A key is `jobs/<job id>/<attempt id>/<relative path>`. The relative path comes from a worker
(or a SimpleTuner trainer), so it is hostile until checked: it must name a file inside its
attempt's folder on every backend, a POSIX data folder and an S3 bucket alike, and read as
what it is wherever it is shown: no control or invisible format characters (a U+202E shows
`gnp.exe` as `exe.png`), and no name starting with `~` (a shell or a careless tool reads
`~/x` or `~root/x` as someone's home folder).
"""

from __future__ import annotations

import re
import unicodedata

from gpufleet.errors import UnsafeArtifactPath

JOBS_PREFIX = "jobs"
# S3 keys are at most 1024 UTF-8 bytes; the job and attempt ids and slashes take their share.
MAX_KEY_BYTES = 1024
# The longest file name ext4, XFS and APFS accept.
MAX_SEGMENT_BYTES = 255
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# How obstore names a data-folder file while it is being written; it refuses such names.
_UNFINISHED = re.compile(r".*#[0-9]+")


def artifact_key(job_id: str, attempt_id: str, path: str) -> str:
    """The store key of `path` in the attempt's folder; `UnsafeArtifactPath` if it is unsafe."""
    key = "/".join((job_prefix(job_id), _checked_id("attempt", attempt_id), checked_path(path)))
    if len(key.encode()) > MAX_KEY_BYTES:
        raise UnsafeArtifactPath(
            f"artifact path {path[:80]!r}… makes a key over {MAX_KEY_BYTES} bytes; "
            "shorten the path or its folder names"
        )
    return key


def job_prefix(job_id: str) -> str:
    """The prefix every key of one job starts with (for listing and deleting a job's files)."""
    return f"{JOBS_PREFIX}/{_checked_id('job', job_id)}"


def checked_path(path: str) -> str:
    """`path` if it is a relative POSIX path of plain segments, else `UnsafeArtifactPath`."""
    problem = _path_problem(path)
    if problem:
        raise UnsafeArtifactPath(
            f"artifact path {path[:80]!r} is refused: {problem}; "
            "give a relative path inside the job folder, like 'output/model.safetensors'"
        )
    return path


def _path_problem(path: str) -> str | None:
    if not path:
        return "it is empty"
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        return "it holds a lone surrogate, which is not valid UTF-8"
    if _CONTROL.search(path):
        return "it holds a control character (NUL, newline, …)"
    if problem := _hidden_problem(path):
        return problem
    if "\\" in path:
        return "it holds a backslash"
    if path.startswith("/"):
        return "it is absolute"
    if len(encoded) > MAX_KEY_BYTES:
        return f"it is over {MAX_KEY_BYTES} bytes"
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            return f"it has an empty, '.' or '..' segment ({segment!r})"
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            return f"a name in it is over {MAX_SEGMENT_BYTES} bytes"
        if segment.startswith("~"):
            return f"a name in it starts with '~' ({segment!r}), which reads as a home folder"
        if _UNFINISHED.fullmatch(segment):
            return f"a name in it ends in '#<digits>' ({segment!r}), kept for unfinished writes"
    return None


# Characters that change how a path reads without showing: the bidi controls (embeddings,
# overrides, isolates, marks), and every other format character (Cf: zero-width spaces and
# joiners, the BOM, soft hyphens); C1 controls and the line and paragraph separators too.
_BIDI = (
    frozenset("\u200e\u200f\u061c")
    | frozenset(map(chr, range(0x202A, 0x202F)))
    | frozenset(map(chr, range(0x2066, 0x206A)))
)
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden_problem(path: str) -> str | None:
    for char in path:
        if char in _BIDI:
            return (
                f"it holds the bidi control U+{ord(char):04X}, which shows the name in another "
                "order than it is"
            )
        if unicodedata.category(char) in _HIDDEN_CATEGORIES:
            return (
                f"it holds U+{ord(char):04X}, an invisible or control character; "
                "rename the file without it"
            )
    return None


def _checked_id(what: str, value: str) -> str:
    if not _ID.fullmatch(value):
        raise UnsafeArtifactPath(
            f"{what} id {value[:80]!r} cannot name an artifact folder; "
            "use the id gpufleet gave (letters, digits, '_', '-', '.')"
        )
    return value
