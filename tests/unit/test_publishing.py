"""The publishing_config a SimpleTuner offer gains (domain/publishing.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain.publishing import (
    artifact_path,
    job_of_key,
    offered_config,
    publishes_elsewhere,
)
from gpufleet.errors import InvalidInput

URL = "https://fleet.example:8001"


def offered(config: dict[str, Any], token: str = "tok") -> dict[str, Any]:
    return offered_config(config, public_url=URL, job_id="j_1", upload_token=token)


def test_a_simpletuner_config_that_publishes_nowhere_gains_the_orchestrators_entry() -> None:
    config = {"model_type": "lora", "output_dir": "output/models"}
    entry = offered(config)["publishing_config"]
    assert entry == [
        {
            "provider": "s3",
            "bucket": "gpufleet",
            "endpoint_url": f"{URL}/api/cloud/storage",
            "access_key": "local",
            "secret_key": "tok",
            "base_path": "j_1",
            "use_ssl": True,
            "request_headers": {"X-SimpleTuner-Secret": "tok"},
            "force_single_part": True,
            "required": True,
        }
    ]
    assert "publishing_config" not in config  # the stored config is not changed


def test_plain_http_turns_ssl_off_and_a_trailing_slash_is_dropped() -> None:
    entry = offered_config(
        {"output_dir": "o"}, public_url="http://10.0.0.5:8001/", job_id="j", upload_token="t"
    )["publishing_config"][0]
    assert entry["endpoint_url"] == "http://10.0.0.5:8001/api/cloud/storage"
    assert entry["use_ssl"] is False


@pytest.mark.parametrize(
    "config",
    [
        {"command": ["python", "train.py"]},
        {"publishing_config": [{"provider": "s3", "bucket": "mine"}]},
        {"publishing_config": '[{"provider": "s3", "bucket": "mine"}]'},
        {"publishing_config": "/etc/publishing.json"},
        {"--publishing_config": {"provider": "azure_blob"}},
    ],
)
def test_a_command_job_or_a_config_with_its_own_publishing_is_left_as_it_is(
    config: dict[str, Any],
) -> None:
    assert offered(config) is config


@pytest.mark.parametrize("unset", [None, "", "None", [], {}])
def test_an_empty_publishing_config_counts_as_none(unset: Any) -> None:
    config = {"--publishing_config": unset}
    assert not publishes_elsewhere(config)
    assert offered(config) == {"publishing_config": offered({})["publishing_config"]}


def test_no_token_no_entry() -> None:
    config = {"output_dir": "o"}
    assert offered(config, token="") is config


def test_a_key_lands_under_output_and_must_start_with_the_job() -> None:
    assert artifact_path("j_1", "j_1/models/lora.safetensors") == "output/models/lora.safetensors"
    assert job_of_key("j_1/models/x") == "j_1"
    for bad in ("j_2/models/x", "j_1/", "j_1", "j_10/x"):
        with pytest.raises(InvalidInput):
            artifact_path("j_1", bad)
    for bad in ("", "j_1", "/x", "j_1/"):
        with pytest.raises(InvalidInput):
            job_of_key(bad)
