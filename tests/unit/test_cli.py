from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, UsageError

COMMANDS = [
    "backup",
    "restore",
    "list",
    "describe",
    "validate",
    "show-offset-mapping",
    "offset-reset",
    "offset-reset-bulk",
    "offset-rollback",
    "three-phase-restore",
    "drill",
]


def test_help_lists_every_command_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"  {command} " in out, command
    assert run(["offset-reset", "--help"]) == 0
    out = capsys.readouterr().out
    assert "plan" in out
    assert "execute" in out


def test_bad_config_is_one_clear_line_with_config_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("source:\n  bootstrap_servers: 127.0.0.1:9092\n  bootstrap_server: typo\n")
    assert run(["check", "--config", str(config)]) == ConfigError.exit_code
    first_line = capsys.readouterr().err.splitlines()[0]
    assert first_line == (
        f"kafka-backup: error: {config}: source.bootstrap_server: unknown key "
        "(did you mean 'bootstrap_servers'?)"
    )


def test_wrong_type_in_config_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("source:\n  bootstrap_servers: 127.0.0.1:9092\n  connect_timeout_secs: soon\n")
    assert run(["check", "-c", str(config)]) == ConfigError.exit_code
    err = capsys.readouterr().err
    assert "source.connect_timeout_secs" in err
    assert "'soon'" in err
    assert "Traceback" not in err


def test_unknown_librdkafka_property_fails_before_network(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    # Port 9 (discard) would hang a real connection attempt; the property check needs none.
    config.write_text("source:\n  bootstrap_servers: 127.0.0.1:9\n  properties:\n    fetch.maxx.bytes: 1\n")
    assert run(["check", "-c", str(config)]) == ConfigError.exit_code
    assert "fetch.maxx.bytes" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["check"]) == UsageError.exit_code
    assert run(["backup", "--no-such-flag"]) == 2
    assert "No such option" in capsys.readouterr().err


def test_internal_errors_hide_traceback_unless_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kbackup.cli import tools_cmds
    from kbackup.core.secrets import register_secret

    register_secret("topsecret-password-1")

    def explode(*_args: object, **_kwargs: object) -> None:
        password = "topsecret-password-1"  # a local that typer's pretty traceback would have printed
        raise RuntimeError(f"boom with {password}")

    monkeypatch.setattr(tools_cmds, "load_config", explode)
    assert run(["check", "-b", "127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom with ***" in err
    # The next step says what to include and where the README says to report it.
    assert "--debug" in err
    assert "kafka-backup --version" in err
    assert '"Reporting a problem"' in err
    assert "Traceback" not in err
    assert "topsecret-password-1" not in err

    assert run(["--debug", "check", "-b", "127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "topsecret-password-1" not in err


def test_console_script_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kbackup", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("kafka-backup ")
