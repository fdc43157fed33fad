"""Typed settings and the command line that builds them: flags, environment and durations."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpufleet.cli.main import COMMANDS, cli, main
from gpufleet.cli.options import DURATION, MAX_SECONDS, env
from gpufleet.cli.server import server
from gpufleet.cli.worker import worker
from gpufleet.errors import ConfigurationError
from gpufleet.server.settings import ServerSettings
from gpufleet.worker.settings import AgentSettings

FACTOR = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
WORK_DIR = Path("/srv/gpufleet/worker")

# ---- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("120", 120.0),
        ("120s", 120.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("0.25s", 0.25),
        (" 2 m ", 120.0),
        ("0", 0.0),
    ],
)
def test_a_duration_is_seconds_or_a_number_with_a_unit(text, seconds):
    assert DURATION.convert(text, None, None) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [30, 2.5])
def test_a_duration_already_given_as_a_number_is_taken_as_seconds(value):
    assert DURATION.convert(value, None, None) == float(value)


@settings(max_examples=200)
@given(
    whole=st.integers(0, 10**6),
    fraction=st.none() | st.integers(0, 999),
    unit=st.sampled_from(sorted(FACTOR)),
)
def test_every_number_with_any_unit_converts_to_seconds(whole, fraction, unit):
    number = f"{whole}" if fraction is None else f"{whole}.{fraction}"
    assert DURATION.convert(number + unit, None, None) == pytest.approx(
        float(number) * FACTOR[unit]
    )


@pytest.mark.parametrize(
    "text", ["", "soon", "-5", "5d", "1.", ".5", "1e3", "m", "1 h 2 m", "2M", "inf", "nan"]
)
def test_anything_else_is_not_a_duration_and_the_error_shows_examples(text):
    with pytest.raises(click.BadParameter) as info:
        DURATION.convert(text, None, None)
    assert repr(text) in info.value.message
    assert "120, 120s, 2m or 1h" in info.value.message


@settings(max_examples=300)
@given(value=st.text(max_size=8) | st.integers() | st.floats() | st.booleans())
def test_a_duration_is_never_negative_nor_endless_whether_text_or_a_number(value):
    try:
        seconds = DURATION.convert(value, None, None)
    except click.BadParameter:
        return
    assert 0 <= seconds <= MAX_SECONDS


@pytest.mark.parametrize("value", [-5, -0.5, float("nan"), float("-inf"), True, False])
def test_a_number_that_is_no_duration_is_refused_as_its_text_would_be(value):
    with pytest.raises(click.BadParameter) as info:
        DURATION.convert(value, None, None)
    assert "is not a duration" in info.value.message


@pytest.mark.parametrize("value", ["9" * 400, "9" * 400 + "h", 10**400, 1e300, float("inf")])
def test_a_duration_too_long_to_wait_is_refused(value):
    with pytest.raises(click.BadParameter, match="longer than any duration can be"):
        DURATION.convert(value, None, None)


@pytest.mark.parametrize("value", [0, 0.0, "0", "0s"])
def test_zero_is_a_duration_whether_text_or_a_number(value):
    assert DURATION.convert(value, None, None) == 0.0


def test_env_names_the_gpufleet_variable_first_then_simpletuner_aliases():
    assert env("PORT") == ["GPUFLEET_PORT"]
    assert env("HEARTBEAT_TIMEOUT", "HEARTBEAT_TIMEOUT", "HB") == [
        "GPUFLEET_HEARTBEAT_TIMEOUT",
        "SIMPLETUNER_HEARTBEAT_TIMEOUT",
        "SIMPLETUNER_HB",
    ]


# ---- server settings ------------------------------------------------------------------------


def test_server_settings_default_to_a_local_orchestrator_with_sqlite():
    s = ServerSettings()
    assert (s.host, s.port, s.database_url) == ("127.0.0.1", 8001, None)
    assert s.data_dir == Path(".gpufleet")
    assert s.heartbeat_timeout > s.heartbeat_interval > 0
    assert s.stream_ping_interval == 15.0  # docs/protocol.md: a ping every 15 s of quiet


@pytest.mark.parametrize(
    "field",
    [
        "heartbeat_timeout",
        "health_interval",
        "ack_timeout",
        "heartbeat_interval",
        "stream_ping_interval",
    ],
)
@pytest.mark.parametrize("value", [0, -1.0])
def test_intervals_and_timeouts_must_be_positive(field, value):
    with pytest.raises(ValidationError):
        ServerSettings(**{field: value})


def test_ephemeral_cleanup_may_be_immediate_but_not_negative():
    assert ServerSettings(ephemeral_cleanup_after=0).ephemeral_cleanup_after == 0
    with pytest.raises(ValidationError):
        ServerSettings(ephemeral_cleanup_after=-1)


@pytest.mark.parametrize(("port", "ok"), [(0, True), (65535, True), (-1, False), (65536, False)])
def test_the_port_must_be_a_tcp_port(port, ok):
    if ok:
        assert ServerSettings(port=port).port == port
    else:
        with pytest.raises(ValidationError):
            ServerSettings(port=port)


def test_server_settings_refuse_unknown_fields_and_cannot_be_changed():
    with pytest.raises(ValidationError):
        ServerSettings(heartbeat_timout=10)
    s = ServerSettings()
    with pytest.raises(ValidationError):
        s.port = 9000


# ---- the server command ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "--port: Input should be less than or equal to 65535"),
        (["--heartbeat-timeout", "0"], "--heartbeat-timeout: Input should be greater than 0"),
        (["--ack-timeout", "0ms"], "--ack-timeout: Input should be greater than 0"),
        (["--webhook-timeout", "0"], "--webhook-timeout: Input should be greater than 0"),
        (
            ["--webhook-allow-hosts", "10.0.0.0/33"],
            "--webhook-allow-hosts: Value error, '10.0.0.0/33' is neither a host name, an "
            "address nor a network (such as 10.0.0.0/8)",
        ),
    ],
)
def test_impossible_server_settings_name_the_flag_to_change(args, message):
    result = CliRunner().invoke(server, args)
    assert isinstance(result.exception, ConfigurationError)
    assert result.exception.message == message


def test_the_artifact_store_defaults_to_the_data_folder_and_the_limit_to_100_gib(tmp_path):
    settings = ServerSettings(data_dir=tmp_path)
    assert settings.artifact_settings().url == str(tmp_path / "artifacts")
    assert settings.artifact_max_job_bytes == 100 * 1024**3
    chosen = ServerSettings(data_dir=tmp_path, artifacts="s3://bucket/prefix")
    assert chosen.artifact_settings().url == "s3://bucket/prefix"
    with pytest.raises(ValidationError):
        ServerSettings(artifact_max_job_bytes=-1)


@pytest.fixture
def no_serving(monkeypatch, tmp_path):
    """A server that gets past its checks fails the test instead of serving forever."""
    import uvicorn

    def serve(self: uvicorn.Server) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn.Server, "run", serve)
    return ["--data-dir", str(tmp_path / "data"), "--port", "0"]


@pytest.mark.parametrize(("timeout", "interval"), [("4", "30"), ("59", "30"), ("1", "0.6")])
def test_a_heartbeat_timeout_below_two_heartbeat_intervals_is_refused_at_start(
    no_serving, timeout, interval
):
    result = CliRunner().invoke(
        server, [*no_serving, "--heartbeat-timeout", timeout, "--heartbeat-interval", interval]
    )
    assert isinstance(result.exception, ConfigurationError)
    message = result.exception.message
    assert message.startswith(f"--heartbeat-timeout {timeout} s is less than twice ")
    assert f"--heartbeat-interval ({interval} s)" in message
    assert f"at least {2 * float(interval):g} s" in message
    assert "\n" not in message


def test_main_refuses_a_flapping_heartbeat_timeout_in_one_line_with_exit_code_1(
    no_serving, monkeypatch, capsys
):
    argv = ["gpufleet", "server", *no_serving, "--heartbeat-timeout", "4"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: --heartbeat-timeout 4 s is less than twice ")
    assert err.count("\n") == 1


def test_an_artifact_store_that_cannot_be_opened_is_refused_at_start(no_serving, monkeypatch):
    monkeypatch.setenv("GPUFLEET_ARTIFACTS", "ftp://nowhere/x")
    result = CliRunner().invoke(server, no_serving)
    assert isinstance(result.exception, ConfigurationError)
    assert "unknown scheme 'ftp'" in result.exception.message
    assert "--artifacts" in result.exception.message


def test_the_artifact_flags_show_their_variables_in_help():
    shown = CliRunner().invoke(server, ["--help"]).output
    assert "GPUFLEET_ARTIFACTS" in shown and "GPUFLEET_ARTIFACT_MAX_JOB_BYTES" in shown


@pytest.mark.parametrize(("timeout", "interval"), [(60, 30), (1, 0.5), (120, 30)])
def test_a_heartbeat_timeout_of_two_intervals_or_more_is_accepted(timeout, interval):
    s = ServerSettings(heartbeat_timeout=timeout, heartbeat_interval=interval)
    assert s.heartbeat_timeout == timeout


@pytest.mark.parametrize("timeout", [3, 59.9])
def test_a_timeout_under_a_minute_warns_that_simpletuner_agents_would_flap(timeout):
    s = ServerSettings(heartbeat_timeout=timeout, heartbeat_interval=0.5)
    warning = s.simpletuner_agent_warning()
    assert warning is not None
    assert "SimpleTuner agent heartbeats every 30 s" in warning
    assert "--heartbeat-timeout 60s or more" in warning


@pytest.mark.parametrize("timeout", [60, 120])
def test_a_timeout_of_a_minute_or_more_warns_of_nothing(timeout):
    assert ServerSettings(heartbeat_timeout=timeout).simpletuner_agent_warning() is None


def test_a_server_flag_falls_back_to_its_environment_variable():
    result = CliRunner().invoke(server, [], env={"GPUFLEET_PORT": "70000"})
    assert isinstance(result.exception, ConfigurationError)
    assert result.exception.message.startswith("--port:")


def test_the_simpletuner_alias_is_read_when_the_gpufleet_variable_is_unset():
    result = CliRunner().invoke(server, [], env={"SIMPLETUNER_HEARTBEAT_TIMEOUT": "0s"})
    assert isinstance(result.exception, ConfigurationError)
    assert result.exception.message.startswith("--heartbeat-timeout:")


def test_a_malformed_duration_is_a_usage_error_naming_the_flag_and_its_variable():
    result = CliRunner().invoke(server, ["--ack-timeout", "soon"])
    assert result.exit_code == 2
    assert "'--ack-timeout' (env var: 'GPUFLEET_ACK_TIMEOUT')" in result.output
    assert "'soon' is not a duration" in result.output


@pytest.mark.parametrize("command", [server, worker], ids=["server", "worker"])
def test_every_flag_has_an_environment_fallback_shown_in_help(command):
    options = [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]
    assert options
    for option in options:
        assert option.envvar, option.name
        assert option.show_envvar, option.name
    text = CliRunner().invoke(command, ["--help"], terminal_width=200).output
    for option in options:
        assert option.envvar[0] in text, option.name


def test_main_prints_a_gpufleet_error_as_one_line_and_exits_1(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gpufleet", "server", "--port", "70000"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err == "Error: --port: Input should be less than or equal to 65535\n"


def test_the_gpufleet_group_answers_its_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("gpufleet, version ")


# What a command imports before it runs: its own module, not every other command's (a
# `gpufleet server` imported the HTTP client and all the operator commands, 0.2 s of each
# server's and worker's start; `gpufleet jobs`, 0.36 s of CPU in all, now 0.19 s).
ALONE = """
import sys
from gpufleet.cli.main import main
sys.argv = ["gpufleet", *sys.argv[1:], "--help"]
try:
    main()
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m.startswith(("gpufleet.cli.", "httpx")))))
"""


@pytest.mark.parametrize(
    ("args", "imported", "not_imported"),
    [
        (["jobs"], "gpufleet.cli.jobs", ["gpufleet.cli.server", "gpufleet.cli.worker"]),
        (["server"], "gpufleet.cli.server", ["gpufleet.cli.jobs", "gpufleet.cli.api", "httpx"]),
        (["worker"], "gpufleet.cli.worker", ["gpufleet.cli.jobs", "gpufleet.cli.server"]),
        (["teams", "list"], "gpufleet.cli.people", ["gpufleet.cli.server", "gpufleet.cli.jobs"]),
    ],
)
def test_a_command_imports_its_own_module_and_not_the_others(
    args: list[str], imported: str, not_imported: list[str]
) -> None:
    modules = subprocess.run(
        [sys.executable, "-c", ALONE, *args], capture_output=True, text=True, check=True
    ).stdout.split()
    assert imported in modules
    assert not set(not_imported) & set(modules), modules


EVERY_COMMAND = (
    "audit configs jobs keys login logout pools queue run secrets server sweeps teams users "
    "webhooks worker workers"
)


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    section = result.output.split("Commands:\n")[1]
    listed = [line.split()[0] for line in section.splitlines() if line.startswith("  ")]
    assert listed == sorted(COMMANDS) == EVERY_COMMAND.split()


def every_help_text() -> Iterator[tuple[str, str]]:
    """(where, text) for every command's and every option's help, subcommands included."""

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, str]]:
        yield path, command.help or ""
        for param in command.params:
            if isinstance(param, click.Option):
                yield f"{path} {param.opts[0]}", param.help or ""
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, f"{path} {name}"
                yield from walk(sub, f"{path} {name}")

    yield from walk(cli, "gpufleet")


def test_no_help_text_says_a_word_or_two_twice_in_a_row() -> None:
    """`gpufleet users create --max-gpus` said "in use at once at once"."""
    repeated = re.compile(r"\b(\w+(?: \w+)?) \1\b")  # case counts: "DAYS days" is right
    found = [(where, m[0]) for where, text in every_help_text() if (m := repeated.search(text))]
    assert found == []


# ---- the worker command's options -----------------------------------------------------------


def worker_params(args: list[str]) -> dict:
    with worker.make_context("worker", args) as ctx:
        return ctx.params


def test_labels_are_key_value_pairs_with_surrounding_spaces_removed():
    params = worker_params(["--label", "gpu=a100", "--label", " zone = us-east ", "--label", "e="])
    assert params["labels"] == {"gpu": "a100", "zone": "us-east", "e": ""}


def test_a_label_value_may_itself_contain_an_equals_sign():
    assert worker_params(["--label", "k=a=b"])["labels"] == {"k": "a=b"}


@pytest.mark.parametrize("label", ["gpu", "=a100", " =x"])
def test_a_label_without_a_key_and_equals_sign_is_refused(label):
    with pytest.raises(click.BadParameter, match="is not key=value"):
        worker_params(["--label", label])


def test_labels_from_the_environment_are_space_separated_pairs(monkeypatch):
    monkeypatch.setenv("GPUFLEET_WORKER_LABELS", "gpu=a100 zone=eu")
    assert worker_params([])["labels"] == {"gpu": "a100", "zone": "eu"}


@pytest.mark.parametrize(
    ("text", "gpus"), [("0,1", (0, 1)), ("3", (3,)), (" 0, 2 ,", (0, 2)), ("", None)]
)
def test_gpus_are_a_comma_separated_list_of_indices(text, gpus):
    assert worker_params(["--gpus", text])["gpus"] == gpus


def test_all_gpus_are_offered_when_none_are_named():
    assert worker_params([])["gpus"] is None


@pytest.mark.parametrize("text", ["a,b", "0;1", "1.5"])
def test_gpus_that_are_not_indices_are_refused(text):
    with pytest.raises(click.BadParameter, match="comma-separated list of GPU indices"):
        worker_params(["--gpus", text])


@pytest.mark.parametrize("flag", ["--heartbeat-interval", "--cancel-grace"])
def test_worker_intervals_are_durations(flag):
    name = flag.removeprefix("--").replace("-", "_")
    assert worker_params([flag, "2m"])[name] == 120.0
    with pytest.raises(click.BadParameter, match="is not a duration"):
        worker_params([flag, "-1"])


# ---- agent settings -------------------------------------------------------------------------


def agent(**overrides) -> AgentSettings:
    values = {
        "orchestrator_url": "https://orch.example.com:8001",
        "worker_token": "wt_secret",
        "name": "gpu-box",
        "work_dir": WORK_DIR,
    }
    values.update(overrides)
    return AgentSettings(**values)


def test_agent_settings_tidy_the_url_and_the_token():
    s = agent(orchestrator_url=" https://orch.example.com:8001/ ", worker_token="  wt_secret\n")
    assert s.orchestrator_url == "https://orch.example.com:8001"
    assert s.worker_token == "wt_secret"


@pytest.mark.parametrize(
    "url", ["orch.example.com:8001", "ftp://orch.example.com", "https://", "", "http:/x"]
)
def test_an_orchestrator_url_must_be_http_or_https_with_a_host(url):
    with pytest.raises(ConfigurationError, match="is not an http\\(s\\) URL"):
        agent(orchestrator_url=url)


def test_several_orchestrator_urls_are_kept_in_order_and_the_first_is_the_url():
    s = agent(orchestrator_url="https://a.example:8001,http://b.example:8001/,https://c.example")
    assert s.orchestrator_urls == (
        "https://a.example:8001",
        "http://b.example:8001",
        "https://c.example",
    )
    assert s.orchestrator_url == "https://a.example:8001"


def test_one_orchestrator_url_is_a_list_of_one():
    assert agent().orchestrator_urls == ("https://orch.example.com:8001",)


@pytest.mark.parametrize(
    "text",
    [
        "https://a.example , https://b.example",
        " https://a.example,\thttps://b.example/ ",
        "https://a.example,,https://b.example,",
    ],
)
def test_spaces_around_commas_and_empty_entries_are_ignored(text):
    assert agent(orchestrator_url=text).orchestrator_urls == (
        "https://a.example",
        "https://b.example",
    )


def test_duplicate_orchestrator_urls_are_dropped_keeping_the_first_place():
    s = agent(orchestrator_url="https://b.example, https://a.example/, https://b.example/")
    assert s.orchestrator_urls == ("https://b.example", "https://a.example")


@pytest.mark.parametrize("bad", ["ftp://b.example", "b.example:8001", "https://"])
def test_one_bad_url_among_good_ones_is_refused_by_name(bad):
    with pytest.raises(ConfigurationError) as info:
        agent(orchestrator_url=f"https://a.example:8001, {bad} ,https://c.example")
    assert str(info.value) == (
        f"--orchestrator-url {bad!r} is not an http(s) URL: pass one like "
        "https://orchestrator.example.com:8001 (several: comma-separated)"
    )


def test_a_list_of_only_commas_is_refused():
    with pytest.raises(ConfigurationError, match="is not an http\\(s\\) URL"):
        agent(orchestrator_url=" , ,")


def test_replacing_a_setting_keeps_every_orchestrator_url():
    s = agent(orchestrator_url="https://a.example, https://b.example")
    assert dataclasses.replace(s, name="other").orchestrator_urls == s.orchestrator_urls


@pytest.mark.parametrize("variable", ["GPUFLEET_ORCHESTRATOR_URL", "SIMPLETUNER_ORCHESTRATOR_URL"])
def test_the_orchestrator_url_variables_take_a_comma_separated_list(monkeypatch, variable):
    for name in [n for n in os.environ if n.startswith(("GPUFLEET_", "SIMPLETUNER_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(variable, "https://a.example:8001 , https://b.example:8001")
    url = worker_params([])["orchestrator_url"]
    assert agent(orchestrator_url=url).orchestrator_urls == (
        "https://a.example:8001",
        "https://b.example:8001",
    )


@pytest.mark.parametrize("token", ["", "   ", "\n"])
def test_an_empty_worker_token_is_refused(token):
    with pytest.raises(ConfigurationError, match="--worker-token is empty"):
        agent(worker_token=token)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"heartbeat_interval": 0}, "--heartbeat-interval must be positive"),
        ({"heartbeat_interval": -1}, "--heartbeat-interval must be positive"),
        ({"cancel_grace": -0.1}, "--cancel-grace must not be negative"),
        ({"preempt_grace": -1}, "--preempt-grace must not be negative"),
        ({"upload_bandwidth": -1}, "--upload-bandwidth must not be negative"),
    ],
)
def test_a_non_positive_heartbeat_or_negative_grace_is_refused_naming_its_flag(overrides, message):
    with pytest.raises(ConfigurationError) as info:
        agent(**overrides)
    assert info.value.message == message


def test_agent_labels_are_copied_and_read_only():
    labels = {"gpu": "a100"}
    s = agent(labels=labels)
    labels["gpu"] = "changed"
    assert s.labels == {"gpu": "a100"}
    assert isinstance(s.labels, MappingProxyType)
    with pytest.raises(TypeError):
        s.labels["gpu"] = "h100"  # type: ignore[index]


def test_tls_verification_is_on_unless_switched_off():
    assert agent().tls_verify() is True
    assert agent(verify_tls=False).tls_verify() is False


# ---- the server command's options, resolved by click as `gpufleet server` would -----------


def _server_params(monkeypatch, *args: str, **env: str) -> dict:
    from gpufleet.cli.server import server

    for name in [n for n in os.environ if n.startswith(("GPUFLEET_", "SIMPLETUNER_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with server.make_context("server", list(args)) as ctx:
        return dict(ctx.params)


def test_the_server_defaults_are_the_documented_ones(monkeypatch):
    params = _server_params(monkeypatch)
    assert params["heartbeat_timeout"] == 120.0
    assert params["health_interval"] == 60.0
    assert params["ephemeral_cleanup_after"] == 3600.0
    assert params["heartbeat_interval"] == 30.0
    assert params["port"] == 8001
    assert params["data_dir"] == Path(".gpufleet")
    assert params["local_gpus"] == "none"


def test_the_documented_simpletuner_heartbeat_timeout_variable_is_honoured(monkeypatch):
    params = _server_params(monkeypatch, SIMPLETUNER_HEARTBEAT_TIMEOUT="300")
    assert params["heartbeat_timeout"] == 300.0


def test_the_gpufleet_variable_wins_over_the_simpletuner_alias(monkeypatch):
    params = _server_params(
        monkeypatch, GPUFLEET_HEARTBEAT_TIMEOUT="45", SIMPLETUNER_HEARTBEAT_TIMEOUT="300"
    )
    assert params["heartbeat_timeout"] == 45.0


def test_a_flag_wins_over_the_environment(monkeypatch):
    params = _server_params(
        monkeypatch, "--heartbeat-timeout", "2m", GPUFLEET_HEARTBEAT_TIMEOUT="45"
    )
    assert params["heartbeat_timeout"] == 120.0


def test_the_poison_job_rule_needs_at_least_one_worker():
    result = CliRunner().invoke(server, [], env={"GPUFLEET_POISON_AFTER_WORKERS": "0"})
    assert result.exit_code == 2
    assert "'--poison-after-workers' (env var: 'GPUFLEET_POISON_AFTER_WORKERS')" in result.output
    with pytest.raises(ValidationError):
        ServerSettings(poison_after_workers=0)
