"""``--log-format json``: one JSON object per line with the event's fields, secrets masked; text stays
the default. (A real backup's JSON lines: tests/integration/test_status.py.)"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError
from kbackup.core.logs import LOGGER_NAME, configure_logging, get_logger
from kbackup.core.secrets import register_secret


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    configure_logging()


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


def test_json_lines_carry_time_level_logger_message_and_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(verbosity=1, log_format="json")
    before = datetime.now(UTC)
    get_logger("backup").info(
        "committed increment %d of %s",
        3,
        "nightly",
        extra={"backup_id": "nightly", "increment": 3, "topic": "orders", "partition": 2},
    )
    (line,) = _lines(capsys)
    event = json.loads(line)
    assert event["message"] == "committed increment 3 of nightly"
    assert (event["level"], event["logger"]) == ("INFO", f"{LOGGER_NAME}.backup")
    assert (event["backup_id"], event["increment"], event["topic"], event["partition"]) == (
        "nightly",
        3,
        "orders",
        2,
    )
    assert event["time"].endswith("Z")
    moment = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    assert moment.utcoffset() is not None
    assert abs((moment - before).total_seconds()) < 5
    assert set(event) == {
        "time",
        "level",
        "logger",
        "message",
        "backup_id",
        "increment",
        "topic",
        "partition",
    }


def test_json_lines_mask_secrets_in_the_message_and_in_fields(capsys: pytest.CaptureFixture[str]) -> None:
    secret = 'pa"ss\\word-1234'  # a quote and a backslash: escaped in JSON, still masked
    register_secret(secret)
    configure_logging(verbosity=1, log_format="json")
    get_logger("backup").warning("login with %s failed", secret, extra={"details": {"password": [secret]}})
    (line,) = _lines(capsys)
    assert "word-1234" not in line
    event = json.loads(line)
    assert event["message"] == "login with *** failed"
    assert event["details"] == {"password": ["***"]}


def test_json_lines_carry_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(log_format="json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        get_logger("restore").exception("failed")
    event = json.loads(_lines(capsys)[0])
    assert event["level"] == "ERROR"
    assert "RuntimeError: boom" in event["exception"]


def test_text_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(verbosity=1)
    get_logger("backup").info("hello %s", "there", extra={"backup_id": "nightly"})
    (line,) = _lines(capsys)
    assert line.endswith(f"INFO {LOGGER_NAME}.backup: hello there")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_the_global_option_picks_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--log-format", "json", "-v", "list", "-p", "/nonexistent/kbackup-status-test"]) != 0
    assert logging.getLogger(LOGGER_NAME).handlers[0].formatter.__class__.__name__ == "JsonFormatter"
    capsys.readouterr()
    assert run(["--log-format", "yaml", "list"]) == ConfigError.exit_code  # a wrong value
    assert "--log-format 'yaml'" in capsys.readouterr().err
