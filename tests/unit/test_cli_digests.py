"""What `gpufleet run` remembers of a folder it packed (cli/digests.py): the digest of an
unchanged folder without reading it, and never a digest for a folder that changed."""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import pytest

from gpufleet.artifacts.workdir_archive import pack
from gpufleet.client.digests import DigestCache, Known, cache_folder, signature

PATHS = ["train.py", "data/words.txt"]
AN_HOUR_AGO = time.time() - 3600


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "data" / "words.txt").write_text("some words\n")
    settle(root)
    return root


def settle(root: Path) -> None:
    """File times well in the past, as for a folder nobody is writing to."""
    for path in PATHS:
        os.utime(root / path, (AN_HOUR_AGO, AN_HOUR_AGO))


def packed(root: Path) -> Known:
    out = io.BytesIO()
    made = pack(root, PATHS, out)
    assert made.sha256 == hashlib.sha256(out.getvalue()).hexdigest()
    return Known(made.sha256, made.size)


def remembered(cache: DigestCache, root: Path) -> Known:
    """Pack `root` as `gpufleet run` does, remembering its digest."""
    before = signature(root, PATHS)
    known = packed(root)
    cache.remember(root, before, known, signature(root, PATHS))
    return known


def test_an_unchanged_folder_is_known_without_being_read(tmp_path: Path) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    assert cache.lookup(root, signature(root, PATHS)) is None
    known = remembered(cache, root)
    assert cache.lookup(root, signature(root, PATHS)) == known
    assert DigestCache(tmp_path / "cache").lookup(root, signature(root, PATHS)) == known


def test_a_changed_file_changes_the_digest(tmp_path: Path) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    first = remembered(cache, root)
    (root / "train.py").write_text("print('yo')\n")  # the same size
    settle(root)  # even with its old times back
    assert cache.lookup(root, signature(root, PATHS)) is None  # its ctime moved
    second = remembered(cache, root)
    assert second.sha256 != first.sha256
    assert cache.lookup(root, signature(root, PATHS)) == second


def test_a_touched_but_same_file_keeps_the_digest(tmp_path: Path) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    first = remembered(cache, root)
    os.utime(root / "train.py")
    settle(root)
    assert cache.lookup(root, signature(root, PATHS)) is None  # packed again, then
    assert remembered(cache, root) == first


def test_a_file_added_removed_or_made_executable_is_not_the_same_folder(tmp_path: Path) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    remembered(cache, root)
    (root / "train.py.bak").write_text("print('hi')\n")
    assert cache.lookup(root, signature(root, [*PATHS, "train.py.bak"])) is None
    assert cache.lookup(root, signature(root, PATHS[:1])) is None
    os.chmod(root / "train.py", 0o755)
    assert cache.lookup(root, signature(root, PATHS)) is None


def test_a_folder_that_changed_while_or_just_before_it_was_packed_is_not_remembered(
    tmp_path: Path,
) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    before = signature(root, PATHS)
    known = packed(root)
    (root / "train.py").write_text("print('written while packing')\n")
    cache.remember(root, before, known, signature(root, PATHS))
    assert cache.lookup(root, before) is None
    (root / "train.py").write_text("print('just written')\n")  # within RACY_NS of the read
    fresh = signature(root, PATHS)
    cache.remember(root, fresh, packed(root), fresh)
    assert cache.lookup(root, fresh) is None


def test_another_folder_or_a_broken_cache_file_knows_nothing(tmp_path: Path) -> None:
    root, cache = folder(tmp_path), DigestCache(tmp_path / "cache")
    remembered(cache, root)
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.rename(root, other / "checkout")
    assert cache.lookup(other / "checkout", signature(other / "checkout", PATHS)) is None
    for kept in (tmp_path / "cache" / "workdirs").iterdir():
        kept.write_text("{not json")
    assert cache.lookup(root, signature(other / "checkout", PATHS)) is None


def test_an_unwritable_cache_is_no_error(tmp_path: Path) -> None:
    root = folder(tmp_path)
    (tmp_path / "cache").write_text("a file where the folder should be")
    cache = DigestCache(tmp_path / "cache")
    remembered(cache, root)
    assert cache.lookup(root, signature(root, PATHS)) is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"GPUFLEET_CACHE_DIR": "/c/mine", "XDG_CACHE_HOME": "/c/xdg"}, "/c/mine"),
        ({"XDG_CACHE_HOME": "/c/xdg"}, "/c/xdg/gpufleet"),
        ({}, str(Path.home() / ".cache" / "gpufleet")),
    ],
)
def test_the_cache_folder_is_the_users_unless_a_variable_names_one(
    environ: dict[str, str], expected: str
) -> None:
    assert str(cache_folder(environ)) == expected
