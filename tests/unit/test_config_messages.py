"""Config and flag errors in the user's words, storage URLs that say what they mean, and commands
run by hand that give up on an unreachable store in seconds (issue 34, items 1, 4 and 8).

Each case runs the CLI and checks its exit code and the one line it prints. No broker and no
object store: ``127.0.0.1:1`` refuses every connection.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kbackup
from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import RestoreFlags, backup_job, restore_inputs, storage_settings
from kbackup.cli.main import run
from kbackup.core.config import INTERACTIVE_MAX_ATTEMPTS, INTERACTIVE_RETRY_TIMEOUT_SECS
from kbackup.core.errors import ConfigError, StorageError

REFUSED = "http://127.0.0.1:1"
NO_BROKER = "127.0.0.1:1"
REPO = Path(__file__).resolve().parents[2]
#: pydantic's words, which a user never wrote and should never read.
PYDANTIC_WORDS = ("Input should", ".bool", "literal[", "list[str]", "dictionary", "instance of", "str]")


def error_lines(err: str) -> list[str]:
    """The lines of one reported error: ``error:`` first, then only a ``next step:``."""
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[0].startswith("kafka-backup: error: "), lines
    assert all(line.startswith("kafka-backup: next step: ") for line in lines[1:]), lines
    return lines


def check_config(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``check -c`` on a file holding ``text``; its one error line, without the file's name."""
    config = tmp_path / "c.yaml"
    config.write_text(text)
    assert run(["check", "-c", str(config)]) == ConfigError.exit_code
    line = error_lines(capsys.readouterr().err)[0]
    for words in PYDANTIC_WORDS:
        assert words not in line, line
    return line.replace(f"kafka-backup: error: {config}: ", "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('source: "kafka:9092"\n', "source: must be a mapping of settings (got a string)"),
        ("storage: [a, b]\n", "storage: must be a mapping of settings (got a list)"),
        (
            "restore:\n  repartition: maybe\n",
            "restore.repartition: must be true, false or a list (got 'maybe')",
        ),
        ("restore:\n  repartition: [orders, 3]\n", "restore.repartition[1]: must be a string (got 3)"),
        (
            "restore:\n  exactly_once: sometimes\n",
            "restore.exactly_once: must be true, false or auto (got 'sometimes')",
        ),
        (
            "restore:\n  log_append_time: never\n",
            "restore.log_append_time: must be keep-original, switch-after or rewrite (got 'never')",
        ),
        (
            "backup:\n  segment_max_bytes: lots\n",
            "backup.segment_max_bytes: must be a whole number (got 'lots')",
        ),
        ("backup:\n  compression_level: 0\n", "backup.compression_level: must be at least 1 (got 0)"),
        (
            "source:\n  bootstrap_servers: a:1\n  topics: {include: []}\n",
            "source.topics.include: must not be empty",
        ),
        (
            "restore:\n  partition_mapping: {orders: {x: 1}}\n",
            "restore.partition_mapping.orders.x: the key must be a whole number (got 'x')",
        ),
        (
            "source:\n  bootstrap_servers: a:1\n  security: {security_protocol: TLS}\n",
            "source.security.security_protocol: must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL "
            "(got 'TLS')",
        ),
        (
            "source:\n  bootstrap_servers: a:1\n  properties: {sasl.password: [x1y2z3]}\n",
            "source.properties.sasl.password: must be a string (got a list)",
        ),
        ("storage:\n  access_key_id: 123456789\n", "storage.access_key_id: must be a string (got a number)"),
    ],
)
def test_config_errors_are_in_the_users_words(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check_config(tmp_path, text, capsys) == expected


def test_a_typo_is_one_problem_not_also_a_missing_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = check_config(tmp_path, "source:\n  bootstrap_server: kafka:9092\n", capsys)
    assert line == "source.bootstrap_server: unknown key (did you mean 'bootstrap_servers'?)"


def test_readme_shows_the_config_error_the_tool_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (REPO / "README.md").read_text()
    found = re.search(r"naming the file, the key and what was expected, e\.g\.\s+`([^`]+)`", readme)
    assert found, "README's example config error is gone"
    example = found.group(1)
    assert example.startswith("backup.yaml: source.bootstrap_server: ")
    monkeypatch.chdir(tmp_path)
    Path("backup.yaml").write_text("source:\n  bootstrap_server: kafka:9092\n")
    assert run(["check", "-c", "backup.yaml"]) == ConfigError.exit_code
    assert error_lines(capsys.readouterr().err) == [f"kafka-backup: error: {example}"]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--time-window-start", "2026-11-21", "--time-window-end", "2026-11-20"],
            "--time-window-end 2026-11-20 must be after --time-window-start 2026-11-21",
        ),
        (
            ["--time-window-start", "1795305600000", "--time-window-end", "1795305600000"],
            "--time-window-end 1795305600000 must be after --time-window-start 1795305600000",
        ),
        (
            ["--time-window-end", "tomorrow"],
            "--time-window-end tomorrow: expected epoch milliseconds or an ISO-8601 time like "
            "2026-11-22T03:15:00Z, got 'tomorrow'",
        ),
        (
            ["--log-append-time", "never"],
            "--log-append-time never: must be keep-original, switch-after or rewrite",
        ),
        (
            ["--target-partitions", "orders=0"],
            "--target-partitions: orders: a topic needs at least 1 partition",
        ),
    ],
)
def test_flag_errors_name_the_flag_as_typed(
    flags: list[str], expected: str, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["restore", "-p", str(store), "--backup-id", "b", "-b", NO_BROKER, *flags])
    assert code == ConfigError.exit_code
    line = error_lines(capsys.readouterr().err)[0]
    assert line.startswith(f"kafka-backup: error: {expected}"), line
    assert "command line" not in line
    assert "(top level)" not in line


def test_a_time_window_flag_against_the_files_window_names_both(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("restore:\n  time_window_start: 2026-11-21T00:00:00Z\n")
    code = run(
        [
            "restore",
            "-c",
            str(config),
            "-p",
            str(store),
            "--backup-id",
            "b",
            "-b",
            NO_BROKER,
            "--time-window-end",
            "2026-11-20",
        ]
    )
    assert code == ConfigError.exit_code
    line = error_lines(capsys.readouterr().err)[0]
    assert line.startswith(
        "kafka-backup: error: --time-window-end 2026-11-20 must be after time_window_start"
    ), line


# Item 1: a storage URL with credentials is refused, without them.


@pytest.mark.parametrize("command", [["list"], ["status"], ["describe", "--backup-id", "b"]])
def test_credentials_in_a_storage_url_are_refused_without_echo(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = run([*command, "-p", "s3://user:pa55word@bucket/x"])
    assert code == ConfigError.exit_code
    lines = error_lines(capsys.readouterr().err)
    assert lines == [
        "kafka-backup: error: --path: s3://***@bucket/x: a storage URL cannot hold a user name or password; "
        "set storage.access_key_id and storage.secret_access_key (write ${ENV_VAR}), or leave them to the "
        "AWS credential chain"
    ]


def test_credentials_in_the_files_storage_url_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = check_config(tmp_path, "storage:\n  url: s3://AKIA1:pa55word@bucket/x\n", capsys)
    assert line.startswith(
        "storage.url: s3://***@bucket/x: a storage URL cannot hold a user name or password"
    )


def test_credentials_in_an_endpoint_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = check_config(tmp_path, "storage:\n  endpoint_url: http://minio:pa55word@minio:9000\n", capsys)
    assert line.startswith("storage.endpoint_url: http://***@minio:9000: an endpoint URL cannot hold")


# Item 4: OSO's ?region=&endpoint= are the keys they name; anything else in a query is refused.


def test_query_parameters_set_region_and_endpoint() -> None:
    config = KBackupConfig.model_validate(
        {"storage": {"url": "s3://bucket/x?region=eu-west-1&endpoint=http://minio:9000"}}
    )
    assert config.storage.url == "s3://bucket/x"
    assert config.storage.region == "eu-west-1"
    assert config.storage.endpoint_url == "http://minio:9000"
    flagged = storage_settings(config, "s3://other/y?endpoint=http://127.0.0.1:9100")
    assert (flagged.url, flagged.endpoint_url, flagged.region) == (
        "s3://other/y",
        "http://127.0.0.1:9100",
        "eu-west-1",
    )


def test_the_query_endpoint_is_the_one_talked_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    config = tmp_path / "c.yaml"
    config.write_text("storage:\n  max_attempts: 1\n  retry_timeout_secs: 0\n")
    code = run(["list", "-c", str(config), "-p", f"s3://bucket/x?region=us-east-1&endpoint={REFUSED}"])
    assert code == StorageError.exit_code
    line = error_lines(capsys.readouterr().err)[0]
    assert f"cannot connect to {REFUSED} (Connection refused)" in line, line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "s3://bucket/x?sse=AES256&force_path_style=true",
            "--path: s3://bucket/x?sse=***&force_path_style=***: a storage URL's query may set only region "
            "and endpoint; write storage.sse, 'force_path_style' as key(s) of the storage section instead",
        ),
        (
            "s3://bucket/x?region=a&region=b",
            "--path: s3://bucket/x?region=***&region=***: the query gives region twice",
        ),
        ("s3://bucket/x?endpoint=minio:9000", "--path: expected http(s)://host[:port], got 'minio:9000'"),
        ("file:///data?region=a", "--path: file:///data?region=***: a file:// URL takes no ?query"),
        ("s3://bucket/x#backups", "--path: s3://bucket/x#backups: a storage URL has no #fragment"),
        (
            "s3://minio:9000/x",
            "--path: s3://minio:9000/x: 'minio:9000' is not a bucket name (letters, digits, '.', '-' and "
            "'_'; an endpoint's host and port go in storage.endpoint_url)",
        ),
    ],
)
def test_other_queries_are_refused_in_one_line(
    url: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["list", "-p", url]) == ConfigError.exit_code
    assert error_lines(capsys.readouterr().err) == [f"kafka-backup: error: {expected}"]


def test_a_query_that_contradicts_a_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = check_config(
        tmp_path, "storage:\n  url: s3://bucket/x?region=eu-west-1\n  region: us-east-1\n", capsys
    )
    assert line == "storage: url sets region=eu-west-1 and region is us-east-1: give it in one place"


# Item 4: a command run by hand gives up on a refused endpoint in seconds; runs keep their patience.


def kafka_backup(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(kbackup.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "KBACKUP_NO_PROGRESS": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "kbackup", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("command", [["list"], ["status"], ["describe", "--backup-id", "b"]])
def test_a_command_run_by_hand_gives_up_on_a_refused_endpoint_in_seconds(
    command: list[str], tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"storage:\n  url: s3://bucket/x\n  endpoint_url: {REFUSED}\n  region: us-east-1\n")
    started = time.monotonic()
    result = kafka_backup(*command, "-c", str(config), cwd=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == StorageError.exit_code, result.stderr
    assert took < 20, f"{took:.0f}s"
    lines = [line for line in result.stderr.splitlines() if line.startswith("kafka-backup: ")]
    assert lines[0].startswith("kafka-backup: error: "), lines
    assert f"cannot connect to {REFUSED} (Connection refused)" in lines[0]
    assert f"a command run by hand tries for {INTERACTIVE_RETRY_TIMEOUT_SECS:g}s" in lines[0]
    assert "to wait longer, set storage.retry_timeout_secs" in lines[1]


def test_runs_keep_their_patience_and_a_file_that_sets_it_is_obeyed() -> None:
    defaults = KBackupConfig.model_validate(
        {"backup_id": "b", "source": {"bootstrap_servers": "a:1"}, "storage": {"url": "s3://bucket/x"}}
    )
    interactive = storage_settings(defaults, None)
    assert (interactive.max_attempts, interactive.retry_timeout_secs) == (
        INTERACTIVE_MAX_ATTEMPTS,
        INTERACTIVE_RETRY_TIMEOUT_SECS,
    )
    assert interactive.patience_shortened
    for run_storage in (
        backup_job(defaults).storage,
        restore_inputs(defaults, flags=RestoreFlags()).storage,
        storage_settings(defaults, "s3://other/y", run=True),
    ):
        assert (run_storage.max_attempts, run_storage.retry_timeout_secs) == (8, 120)
        assert not run_storage.patience_shortened
    patient = KBackupConfig.model_validate(
        {"storage": {"url": "s3://bucket/x", "retry_timeout_secs": 60, "max_attempts": 5}}
    )
    for kept in (storage_settings(patient, None), storage_settings(patient, "s3://other/y")):
        assert (kept.max_attempts, kept.retry_timeout_secs) == (5, 60)
        assert not kept.patience_shortened
