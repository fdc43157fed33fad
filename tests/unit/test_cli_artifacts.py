"""`gpufleet jobs download`'s own rules: which listed files it takes, where each may land, how
it names sizes, and a job named by the start of its id (cli/artifacts.py, cli/transfer.py,
cli/resolve.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.artifacts import nodes_note
from gpufleet.cli.output import size
from gpufleet.cli.resolve import job_id
from gpufleet.client.downloads import select
from gpufleet.client.transfer import target_of
from gpufleet.errors import ClientError, InvalidInput, NotFound


def record(path: str, attempt: int = 1, kind: str = "artifact") -> dict[str, Any]:
    return {"path": path, "attempt_number": attempt, "kind": kind, "attempt_id": f"a_{attempt}"}


LISTED = [
    record("result.json", 2),
    record("output/model.safetensors", 2),
    record("output/checkpoint-20/weights.npz", 2, "checkpoint"),
    record("output/model.safetensors", 1),
    record("output/logs/train.txt", 1),
    record("output/checkpoint-10/weights.npz", 1, "checkpoint"),
]


def chosen(*patterns: str, attempt: int | None = None, checkpoints: bool = True) -> list[Any]:
    return [
        (r["path"], r["attempt_number"])
        for r in select(LISTED, patterns, attempt, checkpoints=checkpoints)
    ]


def test_with_no_path_every_path_comes_once_from_the_newest_attempt_that_has_it() -> None:
    assert chosen() == [
        ("output/checkpoint-10/weights.npz", 1),
        ("output/checkpoint-20/weights.npz", 2),
        ("output/logs/train.txt", 1),
        ("output/model.safetensors", 2),
        ("result.json", 2),
    ]


def test_an_attempt_number_takes_that_attempts_files_only() -> None:
    assert chosen(attempt=1) == [
        ("output/checkpoint-10/weights.npz", 1),
        ("output/logs/train.txt", 1),
        ("output/model.safetensors", 1),
    ]


def test_checkpoints_can_be_left_out() -> None:
    assert [p for p, _ in chosen(checkpoints=False)] == [
        "output/logs/train.txt",
        "output/model.safetensors",
        "result.json",
    ]


def test_a_path_names_a_file_and_a_folder_names_everything_under_it() -> None:
    assert chosen("result.json") == [("result.json", 2)]
    assert [p for p, _ in chosen("./output/logs/")] == ["output/logs/train.txt"]
    # A folder's name is matched by whole segments: `output/log` is not `output/logs`.
    with pytest.raises(NotFound, match="'output/log'"):
        chosen("output/log")


def test_a_star_stays_in_its_folder_and_two_stars_cross_folders() -> None:
    assert [p for p, _ in chosen("output/*.safetensors")] == ["output/model.safetensors"]
    with pytest.raises(NotFound, match=r"'\*\.npz'"):
        chosen("*.npz")  # the .npz files are all in folders
    assert [p for p, _ in chosen("**/*.npz")] == [
        "output/checkpoint-10/weights.npz",
        "output/checkpoint-20/weights.npz",
    ]
    assert [p for p, _ in chosen("output/checkpoint-?0/*")] == [
        "output/checkpoint-10/weights.npz",
        "output/checkpoint-20/weights.npz",
    ]


def test_a_star_alone_does_not_match_files_in_folders() -> None:
    assert chosen("*") == [("result.json", 2)]


def test_glob_characters_that_are_not_wildcards_match_themselves() -> None:
    listed = [record("output/a+b (1).txt"), record("output/aab 1.txt")]
    assert [r["path"] for r in select(listed, ("output/a+b (1).txt",), None)] == [
        "output/a+b (1).txt"
    ]


def test_a_path_nothing_matches_is_named_with_the_command_that_lists_the_files() -> None:
    with pytest.raises(NotFound, match=r"matches 'nope\.bin'.*gpufleet jobs artifacts JOB"):
        chosen("result.json", "nope.bin")


@pytest.mark.parametrize(
    "path",
    ["../escape.txt", "output/../../escape.txt", "/etc/passwd", "output/\x00nul", "", "a//b"],
)
def test_a_listed_path_that_would_leave_the_folder_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ClientError, match="nothing was downloaded"):
        target_of(tmp_path / "into", path)


def test_a_folder_on_the_way_that_links_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    into, elsewhere = tmp_path / "into", tmp_path / "elsewhere"
    into.mkdir()
    elsewhere.mkdir()
    (into / "output").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ClientError, match="a folder on its way is a link to elsewhere"):
        target_of(into, "output/model.bin")


def test_a_plain_path_lands_under_the_folder(tmp_path: Path) -> None:
    assert target_of(tmp_path, "output/model.bin") == tmp_path.resolve() / "output/model.bin"


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 2**30, "5.0 GiB"),
        (2**60, "1048576.0 TiB"),
    ],
)
def test_sizes_read_in_powers_of_1024(count: int | None, shown: str) -> None:
    assert size(count) == shown


class Queue:
    """Answers `GET /api/queue?id_prefix=` as the orchestrator does, from fixed ids."""

    def __init__(self, *ids: str) -> None:
        self.ids = ids
        self.asked: list[dict[str, Any]] = []

    def get(self, path: str, **params: Any) -> Any:
        assert path == "/api/queue"
        self.asked.append(params)
        found = [i for i in self.ids if i.startswith(params["id_prefix"])]
        return {"jobs": [{"id": i} for i in found[: params["limit"]]], "total": len(found)}


QUEUE = Queue("j_abc111", "j_abc222", "j_def333")


def test_a_whole_id_or_a_start_no_other_job_shares_names_the_job() -> None:
    assert job_id(QUEUE, "j_abc111") == "j_abc111"
    assert job_id(QUEUE, "j_d") == "j_def333"


def test_a_start_several_jobs_share_is_refused_naming_them() -> None:
    with pytest.raises(
        InvalidInput, match=r"2 jobs' ids start with 'j_abc' \(j_abc111, j_abc222\)"
    ):
        job_id(QUEUE, "j_abc")


def test_an_unknown_or_empty_job_says_how_to_list_the_jobs() -> None:
    with pytest.raises(NotFound, match="gpufleet jobs list"):
        job_id(QUEUE, "j_zzz")
    with pytest.raises(InvalidInput, match="gpufleet jobs list"):
        job_id(QUEUE, " ")


def test_a_reference_longer_than_the_api_takes_is_cut_for_the_query_and_checked_whole() -> None:
    long = "j_abc111" + "x" * 100
    with pytest.raises(NotFound):
        job_id(QUEUE, long)
    assert len(QUEUE.asked[-1]["id_prefix"]) == 32


def test_a_multi_node_checkpoint_says_whether_every_node_completed_it() -> None:
    assert nodes_note(None) == ""
    done = {"nodes": 2, "done": [0, 1], "missing": [], "complete": True}
    assert nodes_note(done) == " (all 2 nodes)"
    partial = {"nodes": 3, "done": [0], "missing": [1, 2], "complete": False}
    assert nodes_note(partial) == " (incomplete: node 1, 2 missing)"
