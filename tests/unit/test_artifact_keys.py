"""Artifact keys: a path from a worker names a file inside its attempt's folder, or is refused."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.artifacts.keys import (
    MAX_KEY_BYTES,
    MAX_SEGMENT_BYTES,
    artifact_key,
    job_prefix,
)
from gpufleet.errors import InvalidInput, UnsafeArtifactPath


def test_a_relative_path_lands_under_its_job_and_attempt() -> None:
    key = artifact_key("job_1a2b", "att_3c4d", "output/model.safetensors")
    assert key == "jobs/job_1a2b/att_3c4d/output/model.safetensors"


def test_names_with_spaces_unicode_and_hashes_are_kept_as_given() -> None:
    path = "output/checkpoint #12a/модель ü.bin#x/p%41"
    assert artifact_key("job_1", "att_1", path).endswith("/" + path)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        ("../other_job/x", "'..'"),
        ("output/../../x", "'..'"),
        ("output/..", "'..'"),
        ("./output", "'.'"),
        ("output//x", "empty, '.' or '..' segment"),
        ("output/", "empty, '.' or '..' segment"),
        ("/etc/passwd", "absolute"),
        ("//server/share", "absolute"),
        ("output\\..\\x", "backslash"),
        ("C:\\Windows", "backslash"),
        ("model\x00.bin", "control character"),
        ("line\nbreak", "control character"),
        ("bad\ud800name", "lone surrogate"),
        ("a" * (MAX_SEGMENT_BYTES + 1), f"over {MAX_SEGMENT_BYTES} bytes"),
        ("a/" * 600 + "b", f"over {MAX_KEY_BYTES} bytes"),
        ("output/model#2", "'#<digits>'"),
        ("checkpoint#100/state.bin", "'#<digits>'"),
        ("output/\u202egnp.exe", "bidi control U+202E"),
        ("output/\u2067x", "bidi control U+2067"),
        ("output/\u200emark", "bidi control U+200E"),
        ("output/zero\u200bwidth", "U+200B, an invisible"),
        ("\ufeffmodel.bin", "U+FEFF, an invisible"),
        ("output/c1\x85", "U+0085, an invisible or control"),
        ("output/line\u2028sep", "U+2028"),
        ("~", "starts with '~'"),
        ("~/model.bin", "starts with '~'"),
        ("output/~root/x", "starts with '~'"),
    ],
)
def test_hostile_paths_are_refused_with_the_reason(path: str, reason: str) -> None:
    with pytest.raises(UnsafeArtifactPath) as refused:
        artifact_key("job_1", "att_1", path)
    assert reason in refused.value.message
    assert "relative path inside the job folder" in refused.value.message


def test_a_tilde_inside_a_name_and_visible_unicode_are_kept() -> None:
    path = "output/model.bin~/שלום مرحبا x~y.bin"
    assert artifact_key("job_1", "att_1", path).endswith("/" + path)


def test_a_refused_path_is_a_422_input_error() -> None:
    with pytest.raises(InvalidInput) as refused:
        artifact_key("job_1", "att_1", "../x")
    assert refused.value.status_code == 422


def test_a_path_that_fits_alone_but_not_after_the_ids_is_refused() -> None:
    path = "/".join(["a" * 204] * 5)  # 1024 bytes: fits alone, not after the prefix
    with pytest.raises(UnsafeArtifactPath, match="makes a key over 1024 bytes"):
        artifact_key("job_1", "att_1", path)


@pytest.mark.parametrize("bad_id", ["", "..", ".", "a/b", "job 1", "-x", "j\x00", "é"])
def test_ids_that_could_name_another_folder_are_refused(bad_id: str) -> None:
    with pytest.raises(UnsafeArtifactPath, match="id"):
        artifact_key(bad_id, "att_1", "x")
    with pytest.raises(UnsafeArtifactPath, match="id"):
        artifact_key("job_1", bad_id, "x")
    with pytest.raises(UnsafeArtifactPath, match="id"):
        job_prefix(bad_id)


_SEGMENT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=20
)


@settings(max_examples=300)
@given(st.lists(st.one_of(_SEGMENT, st.sampled_from(["..", ".", "", "\\", "\x00"])), max_size=6))
def test_an_accepted_path_never_leaves_its_attempt_folder(segments: list[str]) -> None:
    path = "/".join(segments)
    try:
        key = artifact_key("job_1", "att_1", path)
    except UnsafeArtifactPath:
        return
    prefix = "jobs/job_1/att_1/"
    assert key.startswith(prefix)
    assert posixpath.normpath(key).startswith(prefix)
    assert posixpath.normpath(key) == key
    assert "\\" not in key and "\x00" not in key
    key.encode()  # valid UTF-8: no lone surrogate got through
