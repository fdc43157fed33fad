"""The canonical workdir archive (artifacts/workdir_archive.py): the same tree gives the same
bytes, and every hostile archive is refused before anything is written."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.artifacts.workdir_archive import (
    archive_size,
    check,
    chunks,
    entries_of,
    pack,
    unpack,
)
from gpufleet.errors import UnsafeArchive


def tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o700)
    os.symlink("src/train.py", root / "main.py")
    return root


def packed(root: Path, paths: list[str]) -> bytes:
    out = io.BytesIO()
    pack(root, paths, out)
    return out.getvalue()


PATHS = ["src/train.py", "run.sh", "main.py"]


def test_the_same_tree_packs_to_the_same_bytes_whatever_its_times_and_order(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path / "a")
    first = packed(root, PATHS)
    os.utime(root / "src" / "train.py", (12345, 12345))
    assert packed(root, list(reversed(PATHS))) == first
    other = tree(tmp_path / "b")  # another copy, made later, under another name
    assert packed(other, PATHS) == first
    (other / "run.sh").write_text("#!/bin/sh\necho changed\n")
    assert packed(other, PATHS) != first


def test_entries_are_sorted_with_zeroed_times_owners_and_fixed_modes(tmp_path: Path) -> None:
    root = tree(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(packed(root, PATHS))) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["main.py", "run.sh", "src/train.py"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert [m.mode for m in members] == [0o777, 0o755, 0o644]
    assert members[0].issym() and members[0].linkname == "src/train.py"


def test_unpack_writes_a_fresh_copy_and_replaces_nothing(tmp_path: Path) -> None:
    root = tree(tmp_path / "src-tree")
    archive = tmp_path / "a.tar"
    archive.write_bytes(packed(root, PATHS))
    dest = tmp_path / "job"
    unpack(archive, dest)
    assert (dest / "main.py").read_text() == "print('hi')\n"
    assert os.access(dest / "run.sh", os.X_OK)
    with pytest.raises(FileExistsError):
        unpack(archive, dest)  # a second copy over the first is refused, not merged


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda r: os.symlink("/etc/passwd", r / "bad"), "absolute path"),
        (lambda r: os.symlink("../../outside", r / "bad"), "out of the folder"),
        (lambda r: os.mkfifo(r / "bad"), "not a regular file"),
    ],
    ids=["absolute-link", "link-out", "fifo"],
)
def test_pack_refuses_what_could_leave_the_folder(
    tmp_path: Path, make: Callable[[Path], None], said: str
) -> None:
    make(tmp_path)
    with pytest.raises(UnsafeArchive, match=said):
        packed(tmp_path, ["bad"])


def test_pack_refuses_a_newline_in_a_name(tmp_path: Path) -> None:
    (tmp_path / "two\nlines").write_text("x")
    with pytest.raises(UnsafeArchive, match="control character"):
        packed(tmp_path, ["two\nlines"])


# ---- hostile archives, made by hand as an attacker would -----------------------------------


def hostile(*members: tarfile.TarInfo, data: bytes = b"") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out.getvalue()


def member(
    name: str,
    kind: bytes = tarfile.REGTYPE,
    *,
    link: str = "",
    size: int = 0,
    path: str | None = None,  # the name a PAX record gives instead (a ustar name stops at NUL)
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    if path is not None:
        info.pax_headers = {"path": path}
    return info


HOSTILE = {
    "absolute": (hostile(member("/etc/cron.d/x")), "absolute"),
    "dot-dot": (hostile(member("../escape")), "'..'"),
    "dot-dot-deep": (hostile(member("a/../../escape")), "'..'"),
    "newline": (hostile(member("a\nb")), "control character"),
    "nul": (hostile(member("ab.py", path="a\x00b.py")), "control character"),
    "link-absolute": (hostile(member("l", tarfile.SYMTYPE, link="/etc")), "absolute"),
    "link-out": (hostile(member("d/l", tarfile.SYMTYPE, link="../../x")), "out of the folder"),
    "through-a-link": (
        hostile(member("l", tarfile.SYMTYPE, link="sub"), member("l/x")),
        "under a link",
    ),
    "hard-link": (hostile(member("h", tarfile.LNKTYPE, link="/etc/shadow")), "not a regular"),
    "char-device": (hostile(member("dev", tarfile.CHRTYPE)), "not a regular"),
    "fifo": (hostile(member("pipe", tarfile.FIFOTYPE)), "not a regular"),
    "twice": (hostile(member("a"), member("a")), "twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_check_and_unpack_refuse_a_hostile_archive_writing_nothing(
    tmp_path: Path, case: str
) -> None:
    body, said = HOSTILE[case]
    with pytest.raises(UnsafeArchive, match=said):
        check(io.BytesIO(body), len(body))
    archive = tmp_path / "hostile.tar"
    archive.write_bytes(body)
    with pytest.raises(UnsafeArchive):
        unpack(archive, tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_a_member_claiming_more_bytes_than_the_archive_holds_is_a_bomb() -> None:
    small = member("small", size=10).tobuf(format=tarfile.PAX_FORMAT)
    huge = member("huge", size=50 * 1024**3).tobuf(format=tarfile.PAX_FORMAT)  # carries nothing
    crafted = small + b"0123456789".ljust(512, b"\0") + huge + b"\0" * 1024
    with pytest.raises(UnsafeArchive, match=r"bomb|not a plain tar"):
        check(io.BytesIO(crafted), len(crafted))


def test_unpacked_bytes_are_bounded_by_the_packed_size() -> None:
    body = hostile(member("data", size=4096), data=b"x" * 4096)
    assert [e.path for e in check(io.BytesIO(body), len(body))] == ["data"]
    with pytest.raises(UnsafeArchive, match="bomb"):
        check(io.BytesIO(body), 1000)


def test_a_compressed_or_garbled_archive_is_refused() -> None:
    with pytest.raises(UnsafeArchive, match="not a plain tar"):
        check(io.BytesIO(b"\x1f\x8b" + b"\0" * 600), 602)


def tarfile_archive(root: Path, paths: list[str]) -> bytes:
    """The canonical archive as `tarfile` itself writes it (how `pack` once made it)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(paths, key=str.encode):
            info = tar.gettarinfo(str(root / path), arcname=path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.issym():
                info.mode = 0o777
                tar.addfile(info)
                continue
            info.mode = 0o755 if info.mode & 0o100 else 0o644
            with (root / path).open("rb") as source:
                tar.addfile(info, source)
    return out.getvalue()


def test_pack_writes_the_bytes_tarfile_writes_and_says_their_size(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / ("long-" * 30)).write_bytes(os.urandom(3 * 1024 * 1024 + 7))  # a PAX header
    (root / "é.txt").write_text("not ASCII")
    (root / "empty").write_bytes(b"")
    paths = [*PATHS, "long-" * 30, "é.txt", "empty"]
    made = packed(root, paths)
    assert made == tarfile_archive(root, paths)
    assert archive_size(entries_of(root, paths)) == len(made)


def test_a_file_that_grows_or_goes_while_packed_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path)
    entries = entries_of(root, PATHS)
    (root / "run.sh").write_text("#!/bin/sh\necho longer now\n")
    with pytest.raises(UnsafeArchive, match="changed size"):
        b"".join(chunks(root, entries))
    (root / "run.sh").unlink()
    with pytest.raises(UnsafeArchive, match="cannot be read"):
        b"".join(chunks(root, entries))


def test_unpack_copies_in_python_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path / "tree")
    (root / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024 + 3))
    archive = tmp_path / "a.tar"
    archive.write_bytes(packed(root, [*PATHS, "big.bin"]))

    def refused(*args: object, **kwargs: object) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refused, raising=False)
    unpack(archive, tmp_path / "out")
    for path in ("src/train.py", "run.sh", "big.bin"):
        assert (tmp_path / "out" / path).read_bytes() == (root / path).read_bytes()
    assert os.stat(tmp_path / "out" / "run.sh").st_mode & 0o777 == 0o755
