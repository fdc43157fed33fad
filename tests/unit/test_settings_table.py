"""Each setting declared once (src/gpufleet/settings/): the command lines, the settings objects
and docs/configuration.md are derived from the tables, and nothing that worked before broke."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from gpufleet.cli.server import server
from gpufleet.cli.worker import worker
from gpufleet.errors import ConfigurationError
from gpufleet.server.settings import ServerSettings
from gpufleet.settings import reference
from gpufleet.settings.server import SERVER
from gpufleet.settings.setting import NUMBERS, Kind, Setting, Table, check_annotations
from gpufleet.settings.worker import WORKER
from gpufleet.worker.settings import AgentSettings

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [(server, SERVER), (worker, WORKER)]

# Every variable the commands read before the tables existed: each must keep working.
VARIABLES_BEFORE = [
    "GPUFLEET_ACK_TIMEOUT",
    "GPUFLEET_ARTIFACTS",
    "GPUFLEET_ARTIFACT_MAX_JOB_BYTES",
    "GPUFLEET_ARTIFACT_RETENTION_DAYS",
    "GPUFLEET_AUDIT_KEY_FILE",
    "GPUFLEET_AUTH_FAILURE_LIMIT",
    "GPUFLEET_CANCEL_GRACE",
    "GPUFLEET_CA_CERT",
    "GPUFLEET_DATABASE_URL",
    "GPUFLEET_DATA_DIR",
    "GPUFLEET_EPHEMERAL_CLEANUP_AFTER",
    "GPUFLEET_FORWARDED_ALLOW_IPS",
    "GPUFLEET_GPUS",
    "GPUFLEET_HEALTH_INTERVAL",
    "GPUFLEET_HEARTBEAT_INTERVAL",
    "GPUFLEET_HEARTBEAT_TIMEOUT",
    "GPUFLEET_HOST",
    "GPUFLEET_KEEP_CHECKPOINTS",
    "GPUFLEET_LOCAL_GPUS",
    "GPUFLEET_LOG_FORMAT",
    "GPUFLEET_LOG_LEVEL",
    "GPUFLEET_ORCHESTRATOR_URL",
    "GPUFLEET_POISON_AFTER_WORKERS",
    "GPUFLEET_PORT",
    "GPUFLEET_PREEMPT_GRACE",
    "GPUFLEET_PUBLIC_URL",
    "GPUFLEET_SSL",
    "GPUFLEET_SSL_CERT",
    "GPUFLEET_SSL_KEY",
    "GPUFLEET_SSL_NO_VERIFY",
    "GPUFLEET_UPLOAD_BANDWIDTH",
    "GPUFLEET_USAGE_INTERVAL",
    "GPUFLEET_VERBOSE",
    "GPUFLEET_WEBHOOK_ALLOW_HOSTS",
    "GPUFLEET_WEBHOOK_TIMEOUT",
    "GPUFLEET_WORKER_LABELS",
    "GPUFLEET_WORKER_NAME",
    "GPUFLEET_WORKER_PERSISTENT",
    "GPUFLEET_WORKER_RUN_AS",
    "GPUFLEET_WORKER_TOKEN",
    "GPUFLEET_WORKER_TOKEN_FILE",
    "GPUFLEET_WORK_DIR",
    "SIMPLETUNER_HEARTBEAT_TIMEOUT",
    "SIMPLETUNER_ORCHESTRATOR_URL",
    "SIMPLETUNER_WORKER_NAME",
    "SIMPLETUNER_WORKER_PERSISTENT",
    "SIMPLETUNER_WORKER_RUN_AS",
    "SIMPLETUNER_WORKER_TOKEN",
]


def declared_variables() -> set[str]:
    return {var for table in (SERVER, WORKER) for s in table for var in s.env_vars}


def test_every_variable_that_worked_before_the_tables_is_still_declared() -> None:
    assert set(VARIABLES_BEFORE) <= declared_variables()


@pytest.mark.parametrize(("command", "table"), COMMANDS, ids=["server", "worker"])
def test_each_option_of_a_command_is_one_setting_of_its_table_in_order(
    command: click.Command, table: Table
) -> None:
    options = [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]
    assert [o.name for o in options] == [s.name for s in table]
    for option, declared in zip(options, table, strict=True):
        assert declared.option in option.opts
        assert option.envvar == declared.env_vars
        assert option.help == (declared.help or None)


def params(command: click.Command, *args: str) -> dict[str, object]:
    with command.make_context(command.name or "", list(args)) as ctx:
        return dict(ctx.params)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in [n for n in os.environ if n.startswith(("GPUFLEET_", "SIMPLETUNER_"))]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(("command", "table"), COMMANDS, ids=["server", "worker"])
def test_an_option_not_given_takes_the_tables_default(
    clean_env: pytest.MonkeyPatch, command: click.Command, table: Table
) -> None:
    given = params(command)
    for declared in table:
        if declared.kind in (Kind.LABELS, Kind.GPUS) or declared.required:
            continue
        want = declared.default_value()
        if declared.name == "name":  # the host name, computed when asked
            assert given["name"] and isinstance(given["name"], str)
            continue
        assert given[declared.name] == want, declared.name


def test_the_server_settings_object_takes_its_defaults_and_bounds_from_the_table() -> None:
    built = ServerSettings()
    for declared in SERVER.fields():
        assert getattr(built, declared.name) == declared.default, declared.name


@pytest.mark.parametrize("declared", [s for s in SERVER.fields() if s.kind in NUMBERS])
def test_each_bounded_server_number_is_refused_just_past_its_bounds(declared: Setting) -> None:
    for bound, past in [
        (declared.above, lambda b: b),
        (declared.least, lambda b: b - 1),
        (declared.most, lambda b: b + 1),
    ]:
        if bound is None:
            continue
        with pytest.raises((ValidationError, ConfigurationError)):
            ServerSettings(**{declared.name: past(bound)})


def test_a_choice_set_in_code_is_one_of_the_tables_choices() -> None:
    with pytest.raises(ConfigurationError, match="--log-level 'loud' is not one of debug, info"):
        ServerSettings(log_level="loud")


def test_the_worker_settings_object_takes_its_defaults_from_the_table() -> None:
    built = AgentSettings(orchestrator_url="http://o.example:8001", worker_token="wt_x")
    for declared in WORKER.fields():
        if declared.required or declared.name in ("name", "work_dir"):
            continue  # given above; the host name; resolved to an absolute path
        assert getattr(built, declared.name) == declared.default_value(), declared.name
    assert built.work_dir == WORKER.named("work_dir").default.resolve()


@pytest.mark.parametrize("declared", [s for s in WORKER.fields() if s.kind in NUMBERS])
def test_each_bounded_worker_number_is_refused_naming_its_flag(declared: Setting) -> None:
    past = declared.above if declared.above is not None else (declared.least or 0) - 1
    with pytest.raises(ConfigurationError) as info:
        AgentSettings(
            orchestrator_url="http://o.example:8001",
            worker_token="wt_x",
            **{declared.name: past},
        )
    assert info.value.message.startswith(declared.option + " must ")


def test_a_settings_object_that_drifts_from_its_table_fails_its_import() -> None:
    table = Table("test", Setting("port", Kind.INT, "A port.", default=1))
    check_annotations(table, {"port": "int"}, "Good")
    with pytest.raises(TypeError, match="port: int, not float"):
        check_annotations(table, {"port": "float"}, "Drifted")
    with pytest.raises(TypeError, match="port: int, not None"):
        check_annotations(table, {}, "Missing")


def test_a_table_refuses_a_setting_declared_twice() -> None:
    twice = Setting("port", Kind.INT, "A port.")
    with pytest.raises(ValueError, match="declared twice"):
        Table("test", twice, twice)


def test_an_error_about_a_setting_names_its_flag_not_its_field() -> None:
    # `use_ssl` is `--ssl`: the message says what to type.
    assert SERVER.flag_of("use_ssl") == "--ssl"
    result = CliRunner().invoke(server, ["--ssl-cert", "c.pem"])
    assert isinstance(result.exception, ConfigurationError)
    assert result.exception.message == "--ssl-cert and --ssl-key need --ssl"


def test_comma_separated_allow_hosts_become_their_entries(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GPUFLEET_WEBHOOK_ALLOW_HOSTS", " hooks.internal , 10.1.0.0/16,,")
    assert params(server)["webhook_allow_hosts"] == ("hooks.internal", "10.1.0.0/16")


def test_the_configuration_reference_is_the_one_the_tables_write() -> None:
    committed = (REPO / reference.PATH).read_text()
    assert committed == reference.render(), (
        f"docs/configuration.md is not what the tables say: run `{reference.COMMAND}` "
        "from the repository's root to regenerate it"
    )


def test_the_reference_has_a_row_for_every_setting_with_its_variables() -> None:
    text = reference.render()
    for table in (SERVER, WORKER):
        for declared in table:
            line = next(line for line in text.splitlines() if f"`{declared.option}" in line)
            assert all(f"`{var}`" in line for var in declared.env_vars), declared.name
