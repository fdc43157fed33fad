"""What a job keeps: the artifact and checkpoint globs, their checks, and the files they pick."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.worker.job import JobSpec
from gpufleet.worker.keep import (
    DEFAULT_ARTIFACTS,
    BadKeepRule,
    KeepRules,
    artifact_files,
    checkpoint_folders,
    inside,
)
from gpufleet.worker.offer import BadOffer, Offer


def write(folder: Path, *paths: str) -> None:
    for path in paths:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(path)


def test_by_default_a_job_keeps_its_output_folder_and_result_json(tmp_path: Path) -> None:
    write(
        tmp_path,
        "output/model.bin",
        "output/deep/er/x.txt",
        "result.json",
        "config.json",
        "progress.jsonl",
        "output.log",
        "scratch/tmp.bin",
        "outputs/not-this.bin",
    )
    rules = KeepRules.from_config({}, simpletuner=False)

    assert rules == KeepRules(DEFAULT_ARTIFACTS, ())
    assert artifact_files(tmp_path, rules) == [
        "output/deep/er/x.txt",
        "output/model.bin",
        "result.json",
    ]


def test_a_simpletuner_config_keeps_its_output_dir_and_checkpoints_there(tmp_path: Path) -> None:
    write(tmp_path, "out/lora.safetensors", "out/checkpoint-10/w.bin", "result.json")
    (tmp_path / "out/checkpoint-10/sub").mkdir()
    rules = KeepRules.from_config({"output_dir": "out/"}, simpletuner=True)

    assert rules == KeepRules(("out",), ("out/checkpoint-*",))
    assert artifact_files(tmp_path, rules) == ["out/checkpoint-10/w.bin", "out/lora.safetensors"]
    assert checkpoint_folders(tmp_path, rules) == ["out/checkpoint-10"]


def test_a_command_job_s_output_dir_is_only_config_not_a_keep_rule() -> None:
    assert KeepRules.from_config({"output_dir": "out"}, simpletuner=False).artifacts == (
        DEFAULT_ARTIFACTS
    )


def test_the_config_s_own_globs_win_and_star_stays_within_a_name(tmp_path: Path) -> None:
    write(tmp_path, "a/x.pt", "a/b/y.pt", "a/b/c/z.pt", "a/x.txt", "m.pt", "ckpt/step-1/w")
    rules = KeepRules.from_config(
        {"artifacts": ["a/*.pt", "**/z.pt", "m.?t"], "checkpoints": "ckpt/step-*"},
        simpletuner=False,
    )

    assert artifact_files(tmp_path, rules) == ["a/b/c/z.pt", "a/x.pt", "m.pt"]
    assert checkpoint_folders(tmp_path, rules) == ["ckpt/step-1"]


def test_an_empty_list_keeps_nothing(tmp_path: Path) -> None:
    write(tmp_path, "output/model.bin", "result.json")
    assert (
        artifact_files(tmp_path, KeepRules.from_config({"artifacts": []}, simpletuner=False)) == []
    )


def test_links_that_lead_out_of_the_job_folder_are_never_uploaded(tmp_path: Path) -> None:
    job, secret = tmp_path / "job", tmp_path / "secret"
    write(job, "output/model.bin")
    secret.mkdir()
    (secret / "id_rsa").write_text("private")
    os.symlink(secret / "id_rsa", job / "output/key")
    os.symlink(secret, job / "output/linked-folder")
    os.symlink("/etc/passwd", job / "result.json")
    os.symlink(job / "output/model.bin", job / "output/alias.bin")  # inside: kept

    rules = KeepRules.from_config({}, simpletuner=False)
    assert artifact_files(job, rules) == ["output/alias.bin", "output/model.bin"]
    assert inside(job, "output/key") is None
    assert inside(job, "../secret") is None
    assert inside(job, str(job / "output")) == "output"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"artifacts": ["../elsewhere/**"]}, "artifacts"),
        ({"artifacts": ["output/../../x"]}, "artifacts"),
        ({"artifacts": ["/etc/passwd"]}, "artifacts"),
        ({"artifacts": ["~/.ssh/*"]}, "artifacts"),
        ({"artifacts": ["output/\0"]}, "artifacts"),
        ({"artifacts": ["out\\..\\x"]}, "artifacts"),
        ({"artifacts": [""]}, "artifacts"),
        ({"artifacts": [1, 2]}, "artifacts"),
        ({"artifacts": {"a": "b"}}, "artifacts"),
        ({"artifacts": ["x" * 5000]}, "artifacts"),
        ({"artifacts": ["a"] * 1000}, "artifacts"),
        ({"checkpoints": "/abs/checkpoint-*"}, "checkpoints"),
        ({"checkpoints": ["../checkpoint-*"]}, "checkpoints"),
        ({"checkpoints": 7}, "checkpoints"),
    ],
)
def test_a_glob_that_could_leave_the_job_folder_is_refused_naming_the_key(
    config: dict[str, object], named: str
) -> None:
    with pytest.raises(BadKeepRule, match=f"^{named}"):
        KeepRules.from_config(config, simpletuner=False)


@pytest.mark.parametrize("output_dir", ["/models/out", "../out", 7])
def test_a_simpletuner_output_dir_outside_the_folder_is_not_kept_but_the_job_runs(
    output_dir: object, caplog: pytest.LogCaptureFixture
) -> None:
    rules = KeepRules.from_config({"output_dir": output_dir}, simpletuner=True)
    assert rules == KeepRules(DEFAULT_ARTIFACTS, ())
    assert "its files are not uploaded" in caplog.text


def test_a_bad_keep_rule_makes_the_offer_unrunnable_with_a_clear_message() -> None:
    offer = Offer.from_event(
        {
            "job_id": "j_1",
            "attempt_id": "a_1",
            "config": {"artifacts": ["../../etc/**"]},
            "command": ["true"],
        }
    )
    with pytest.raises(BadOffer, match=r"job j_1: artifacts '\.\./\.\./etc/\*\*' is refused"):
        JobSpec.from_offer(offer)


@pytest.mark.parametrize(
    "resume",
    [
        "k_1",
        {"checkpoint_id": "../../x", "path": "output/checkpoint-1"},
        {"checkpoint_id": "k_1", "path": "../checkpoint-1"},
        {"checkpoint_id": "k_1", "path": "/abs"},
        {"checkpoint_id": "k_1", "path": "output/\0"},
        {"checkpoint_id": "k_1"},
    ],
)
def test_a_resume_the_worker_cannot_follow_makes_the_offer_unrunnable(resume: object) -> None:
    offer = Offer.from_event(
        {"job_id": "j_1", "attempt_id": "a_1", "config": {}, "command": ["true"], "resume": resume}
    )
    with pytest.raises(BadOffer, match="job j_1: the offer's resume"):
        JobSpec.from_offer(offer)
