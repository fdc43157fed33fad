"""What `gpufleet run` sends of a folder (cli/workdir.py): git's ignore rules, from every
.gitignore and .gpufleetignore in the tree, and the folders that never go."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.client.workdir import biggest, select, selected
from gpufleet.errors import PayloadTooLarge


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_ignore_files_leave_out_what_git_would_nested_rules_and_negations_included(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n",
            ".gpufleetignore": "data/*.bin\n",
            "train.py": "",
            "run.log": "",
            "keep.log": "",
            "build/out.o": "",
            "data/a.bin": "",
            "data/a.txt": "",
            "sub/.gitignore": "local.txt\n",
            "sub/local.txt": "",
            "sub/code.py": "",
            "other/local.txt": "",
        },
    )
    assert select(tmp_path) == [
        ".gitignore",
        ".gpufleetignore",
        "data/a.txt",
        "keep.log",
        "other/local.txt",  # sub/.gitignore speaks for sub/ only
        "sub/.gitignore",
        "sub/code.py",
        "train.py",
    ]


def test_the_repository_and_the_orchestrators_data_folder_never_go(tmp_path: Path) -> None:
    write(tmp_path, {".git/config": "", ".gpufleet/admin.token": "k", "a.py": ""})
    assert select(tmp_path) == ["a.py"]


def test_a_snapshot_over_the_limit_names_its_biggest_entries(tmp_path: Path) -> None:
    write(tmp_path, {"weights/a.pt": "x" * 3000, "weights/b.pt": "x" * 3000, "a.py": "x"})
    assert biggest(tmp_path, select(tmp_path)) == [("weights/", 6000), ("a.py", 1)]
    with pytest.raises(PayloadTooLarge, match=r"weights/ \(5\.9 KiB\)"):
        selected(tmp_path, 1000)
    assert selected(tmp_path, 10_000) == ["a.py", "weights/a.pt", "weights/b.pt"]
