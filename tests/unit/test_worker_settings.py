"""The worker's artifact settings on its command line: flags, variables, their checks."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpufleet.cli.worker import worker


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        (["--upload-bandwidth", "fast"], {}, "'fast' is not a rate"),
        ([], {"GPUFLEET_UPLOAD_BANDWIDTH": "-5M"}, "'-5M' is not a rate"),
        (["--upload-bandwidth", "9" * 30], {}, "is past any link"),
        (["--preempt-grace", "soon"], {}, "'soon' is not a duration"),
        ([], {"GPUFLEET_PREEMPT_GRACE": "-1"}, "'-1' is not a duration"),
    ],
)
def test_a_bad_upload_or_preempt_setting_is_a_usage_error_saying_how_to_write_it(
    args: list[str], env: dict[str, str], shown: str
) -> None:
    result = CliRunner().invoke(worker, args, env=env)
    assert result.exit_code == 2
    assert shown in result.output


def test_help_documents_the_new_settings_and_what_sigterm_now_means() -> None:
    text = CliRunner().invoke(worker, ["--help"], terminal_width=200).output
    assert "GPUFLEET_UPLOAD_BANDWIDTH" in text and "GPUFLEET_PREEMPT_GRACE" in text
    assert "SIGTERM" in text and "preempted" in text
