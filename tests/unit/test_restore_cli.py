"""``kafka-backup restore``: option parsing and the errors found before any network call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.cli.restore_cmds import _offset_ranges
from kbackup.core.errors import ConfigError, NotFoundError, UsageError
from kbackup.format.restore_progress import PartitionProgress, decode_progress, encode_progress, progress_key
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

# Nothing listens here: a test that reached the network would fail with exit code 5, not the one asserted.
NO_BROKER = "127.0.0.1:1"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "nightly", scratch_dir=tmp_path)
    builder.topic("orders", 1)
    builder.partition("orders", 0, [BackupRecord(offset=0, value=b"v")])
    builder.commit()
    return tmp_path / "store"


def test_offset_range_option_parsing() -> None:
    assert _offset_ranges(["orders:0:10-20", "my.topic:3:-5", "orders:1:7-"]) == {
        "orders": {"0": {"start": 10, "end": 20}, "1": {"start": 7, "end": None}},
        "my.topic": {"3": {"start": None, "end": 5}},
    }
    for bad in ["orders:0", "orders:x:1-2", "orders:0:1-x", ":0:1-2"]:
        with pytest.raises(ConfigError):  # a wrong value of an option (docs/exit-codes.md)
            _offset_ranges([bad])


def test_missing_backup_id_is_a_usage_error(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given neither by a flag nor by the config: the same code and words as every command's.
    assert run(["restore", "-p", str(store), "-b", NO_BROKER]) == UsageError.exit_code
    assert "no backup id: give --backup-id" in capsys.readouterr().err


def test_unknown_backup_is_not_found(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run(["restore", "-p", str(store), "--backup-id", "other", "-b", NO_BROKER]) == NotFoundError.exit_code
    )
    assert "no backup 'other'" in capsys.readouterr().err


def test_unknown_topic_in_mapping_is_named_as_json(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(
        [
            "restore",
            "-p",
            str(store),
            "--backup-id",
            "nightly",
            "-b",
            NO_BROKER,
            "--topic-mapping",
            "ghost=x",
            "--json",
        ]
    )
    assert code == NotFoundError.exit_code
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "not-found"
    assert "topic 'ghost' is not in backup 'nightly'" in error["message"]


def test_bad_cli_values_are_reported_against_the_command_line(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        [
            "restore",
            "-p",
            str(store),
            "--backup-id",
            "nightly",
            "-b",
            NO_BROKER,
            "--time-window-start",
            "soon",
        ]
    )
    assert code == ConfigError.exit_code
    assert "kafka-backup: error: --time-window-start soon: expected epoch milliseconds" in (
        capsys.readouterr().err
    )
    assert run(["restore", "--topic-mapping", "no-equals-sign"]) == ConfigError.exit_code


def test_config_file_and_flags_combine(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "restore.yaml"
    config.write_text(
        f"backup_id: nightly\nstorage:\n  url: {store}\ntarget:\n  bootstrap_servers: ['{NO_BROKER}']\n"
        "restore:\n  topic_mapping: {orders: a}\n"
    )
    # The flag's mapping is checked too: flags override and extend the config's keys.
    assert run(["restore", "-c", str(config), "--topic-mapping", "nope=b"]) == NotFoundError.exit_code
    assert "topic 'nope'" in capsys.readouterr().err


def test_progress_record_round_trip() -> None:
    progress = PartitionProgress(
        "orders", 2, "restored-orders", next_offset=1234, restored_records=999, complete=True
    )
    value = encode_progress("rid", "nightly", "prod", progress)
    assert json.loads(value)["next_offset"] == 1234
    assert decode_progress(value) == progress
    assert decode_progress(b"{not json") is None
    assert decode_progress(json.dumps({"format": 2}).encode()) is None
    assert progress_key("rid", "orders", 2) == b"rid/orders/2"
