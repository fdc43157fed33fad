"""What `gpufleet run` sends of a folder (docs/jobs.md): its files, less what `.gitignore` and
`.gpufleetignore` files leave out (git's rules, each file's patterns relative to its folder,
a deeper file's last word winning), which `gpufleet run` packs as the canonical
archive of artifacts/workdir_archive.py.

Always left out: `.git` (the repository's history is not the job's code), `.gpufleet` (the
orchestrator's default data folder, which holds its admin key) and `.gpufleet-job`.
"""

from __future__ import annotations

import os
from pathlib import Path

from pathspec import GitIgnoreSpec

from gpufleet.client import text
from gpufleet.errors import InvalidInput, PayloadTooLarge

IGNORE_FILES = (".gitignore", ".gpufleetignore")
ALWAYS_OUT = frozenset({".git", ".gpufleet", ".gpufleet-job"})
SHOWN = 10  # the biggest entries listed when a snapshot is too large

_Specs = list[tuple[str, GitIgnoreSpec]]  # (the folder it lies in, relative; its rules)


def select(root: Path) -> list[str]:
    """The relative paths of the files and links under `root` that the ignore rules keep."""
    if not root.is_dir():
        raise InvalidInput(f"--workdir {root} is not a folder")
    found: list[str] = []
    _walk(root, "", [], found)
    return found


def _walk(root: Path, folder: str, specs: _Specs, found: list[str]) -> None:
    here = root / folder if folder else root
    specs = specs + [(folder, spec) for spec in _specs_in(here)]
    with os.scandir(here) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        if entry.name in ALWAYS_OUT:
            continue
        rel = f"{folder}/{entry.name}" if folder else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if _ignored(rel, is_dir, specs):
            continue
        if is_dir:
            _walk(root, rel, specs, found)
        else:
            found.append(rel)


def _specs_in(folder: Path) -> list[GitIgnoreSpec]:
    specs = []
    for name in IGNORE_FILES:
        path = folder / name
        if path.is_file():
            specs.append(GitIgnoreSpec.from_lines(path.read_text(errors="replace").splitlines()))
    return specs


def _ignored(rel: str, is_dir: bool, specs: _Specs) -> bool:
    ignored = False
    for folder, spec in specs:
        inner = rel[len(folder) + 1 :] if folder else rel
        result = spec.check_file(f"{inner}/" if is_dir else inner)
        if result.include is not None:
            ignored = result.include
    return ignored


def biggest(root: Path, paths: list[str], count: int = SHOWN) -> list[tuple[str, int]]:
    """The largest top-level entries (a folder's files added up), largest first."""
    sizes: dict[str, int] = {}
    for path in paths:
        head, _, rest = path.partition("/")
        name = f"{head}/" if rest else head
        sizes[name] = sizes.get(name, 0) + os.lstat(root / path).st_size
    return sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:count]


def selected(root: Path, max_bytes: int) -> list[str]:
    """The files of the folder that its snapshot holds; `PayloadTooLarge` over `max_bytes`
    (their bytes), naming the biggest entries."""
    paths = select(root)
    total = sum(os.lstat(root / p).st_size for p in paths)
    if total > max_bytes:
        listed = ", ".join(f"{name} ({text.size(bytes_)})" for name, bytes_ in biggest(root, paths))
        raise PayloadTooLarge(
            f"the workdir {root} holds {text.size(total)}, over --max-workdir-size "
            f"({text.size(max_bytes)}); the biggest: {listed}. Leave them out in .gpufleetignore "
            "or .gitignore, or raise --max-workdir-size"
        )
    return paths
