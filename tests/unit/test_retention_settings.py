"""`--artifact-retention-days` and `--keep-checkpoints`: flags with environment fallbacks that
reach the server's settings, and values that cannot work refused naming the flag."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from gpufleet.cli.server import server
from gpufleet.server.settings import ServerSettings


class Started(Exception):
    """The settings got as far as building the app."""


@pytest.fixture
def settings_of(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    import gpufleet.server.app

    def capture(settings: ServerSettings, **_: Any) -> None:
        raise Started(settings)

    monkeypatch.setattr(gpufleet.server.app, "create_app", capture)

    def run(args: list[str], env: dict[str, str] | None = None) -> ServerSettings:
        result = CliRunner().invoke(
            server, ["--data-dir", str(tmp_path / "d"), "--port", "0", *args], env=env
        )
        assert isinstance(result.exception, Started), result.output
        settings: ServerSettings = result.exception.args[0]
        return settings

    return run


def test_retention_defaults_to_thirty_days_and_three_checkpoints(settings_of: Any) -> None:
    settings = settings_of([])
    assert (settings.artifact_retention_days, settings.keep_checkpoints) == (30.0, 3)


def test_retention_flags_and_their_variables_reach_the_settings(settings_of: Any) -> None:
    flags = settings_of(["--artifact-retention-days", "0", "--keep-checkpoints", "7"])
    assert (flags.artifact_retention_days, flags.keep_checkpoints) == (0.0, 7)
    env = {"GPUFLEET_ARTIFACT_RETENTION_DAYS": "1.5", "GPUFLEET_KEEP_CHECKPOINTS": "0"}
    from_env = settings_of([], env)
    assert (from_env.artifact_retention_days, from_env.keep_checkpoints) == (1.5, 0)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--artifact-retention-days", "-1"], "--artifact-retention-days"),
        (["--artifact-retention-days", "nan"], "--artifact-retention-days"),
        (["--artifact-retention-days", "1e400"], "--artifact-retention-days"),
        (["--keep-checkpoints", "-3"], "--keep-checkpoints"),
        (["--keep-checkpoints", "99999999999999999999"], "--keep-checkpoints"),
    ],
)
def test_impossible_retention_values_are_refused_naming_the_flag(
    args: list[str], named: str
) -> None:
    """By click (a usage error) or by the settings (NaN passes click's range check)."""
    result = CliRunner().invoke(server, args)
    assert result.exit_code in (1, 2), result.output
    assert named in result.output + str(result.exception)
