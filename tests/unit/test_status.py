"""``kafka-backup status``: durations, the recovery point read from manifests, breach evaluation, and
the command's exit codes where no broker is needed (real Kafka: tests/integration/test_status.py)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

from kbackup.backup.status import BackupStatus, PartitionStatus, backup_status, find_breaches
from kbackup.cli.main import run
from kbackup.core.durations import format_duration, parse_duration
from kbackup.core.errors import (
    ConfigError,
    KafkaUnreachableError,
    PreconditionError,
    RecoveryPointAlert,
    UsageError,
)
from kbackup.core.times import parse_iso
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("45s", 45),
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        (" 2H ", 7200),
        ("0.5s", 0.5),
    ],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "15x", "15 m", "1h 30m", "-5m", "0s", "0", "1y", "h1", "15mm"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_durations_read_back_shortly() -> None:
    assert [format_duration(s) for s in (0, 0.4, 2.0, 45, 60, 252, 3600, 7380, 86400, 97200)] == [
        "0s",
        "0.4s",
        "2s",
        "45s",
        "1m",
        "4m 12s",
        "1h",
        "2h 3m",
        "1d",
        "1d 3h",
    ]


def _status(backup_id: str, *, age: float, lags: list[int] | None = None) -> BackupStatus:
    partitions = [
        PartitionStatus(
            topic="orders", partition=index, backed_up_end_offset=100, records=100, live_end_offset=100 + lag
        )
        for index, lag in enumerate(lags or [])
    ]
    return BackupStatus(
        backup_id=backup_id,
        source_cluster="prod",
        kafka_cluster_id="k1",
        increments=3,
        last_increment=2,
        last_committed_at="2026-11-24T21:00:00.000Z",
        age_seconds=age,
        records=300,
        bytes=3000,
        partitions=partitions,
        source_checked="prod:9092" if lags is not None else None,
    )


def test_no_limits_no_breaches() -> None:
    assert find_breaches([_status("a", age=1e9, lags=[10**9])], max_age_secs=None, max_lag=None) == []


def test_an_old_backup_breaches_max_age_by_how_much() -> None:
    fresh, stale = _status("fresh", age=600), _status("stale", age=7380)
    breaches = find_breaches([fresh, stale], max_age_secs=3600, max_lag=None)
    assert [(b.backup_id, b.limit_name, b.value, b.limit, b.excess) for b in breaches] == [
        ("stale", "max-age", 7380, 3600, 3780)
    ]
    assert breaches[0].message == (
        "backup stale: last increment 2 was committed 2h 3m ago (2026-11-24T21:00:00.000Z), "
        "1h 3m over --max-age 1h"
    )


def test_the_age_limit_itself_is_not_a_breach() -> None:
    assert find_breaches([_status("a", age=3600)], max_age_secs=3600, max_lag=None) == []


def test_lag_is_summed_over_partitions_and_names_the_worst() -> None:
    status = _status("a", age=10, lags=[0, 40, 70])
    assert status.lag == 110
    assert find_breaches([status], max_age_secs=None, max_lag=110) == []
    (breach,) = find_breaches([status], max_age_secs=3600, max_lag=100)
    assert (breach.limit_name, breach.value, breach.excess) == ("max-lag", 110, 10)
    assert (
        breach.message
        == "backup a: 110 record(s) behind the source, 10 over --max-lag 100; most behind: orders/2 by 70"
    )


def test_both_limits_give_two_lines() -> None:
    breaches = find_breaches([_status("a", age=7200, lags=[5])], max_age_secs=60, max_lag=0)
    assert [b.limit_name for b in breaches] == ["max-age", "max-lag"]


def test_max_lag_without_the_source_read_never_passes() -> None:
    with pytest.raises(PreconditionError, match="--max-lag needs the source"):
        find_breaches([_status("a", age=1)], max_age_secs=None, max_lag=1000)


def test_records_deleted_by_retention_before_a_backup_are_lost_not_behind() -> None:
    item = PartitionStatus(
        topic="t",
        partition=0,
        backed_up_end_offset=100,
        records=100,
        live_end_offset=500,
        live_log_start_offset=300,
    )
    assert item.lag == 200
    assert PartitionStatus(topic="t", partition=0, backed_up_end_offset=7, records=7).lag is None


@pytest.fixture
def store(tmp_path: Path) -> Path:
    storage = LocalStorage(tmp_path / "store")
    first = BackupBuilder(storage, "nightly", scratch_dir=tmp_path)
    first.topic("orders", 2)
    first.partition("orders", 0, [BackupRecord(offset=o, value=b"v", timestamp=1_000 + o) for o in range(5)])
    first.partition("orders", 1, [], start_offset=0, end_offset=0)
    first.commit()
    time.sleep(0.01)  # two commit times that differ, so the test can tell which one status reports
    second = BackupBuilder(storage, "nightly", scratch_dir=tmp_path)
    second.topic("orders", 2)
    second.partition(
        "orders", 0, [BackupRecord(offset=o, value=b"v", timestamp=2_000 + o) for o in range(5, 9)]
    )
    second.partition("orders", 1, [], start_offset=0, end_offset=0)
    second.commit()
    return tmp_path / "store"


def test_the_recovery_point_and_windows_come_from_the_manifests(store: Path) -> None:
    backup = BackupCatalog(LocalStorage(store)).load("nightly")
    now = parse_iso(backup.latest.finished_at) + timedelta(seconds=90)
    status = backup_status(backup, now=now)
    assert (status.increments, status.last_increment, status.records) == (2, 1, 9)
    assert status.last_committed_at == backup.latest.finished_at != backup.manifests[0].finished_at
    assert status.age_seconds == pytest.approx(90)
    assert status.bytes == backup.total_bytes() > 0
    windows = [
        (p.topic, p.partition, p.first_offset, p.last_offset, p.first_timestamp, p.last_timestamp, p.records)
        for p in status.partitions
    ]
    assert windows == [("orders", 0, 0, 8, 1_000, 2_008, 9), ("orders", 1, None, None, None, None, 0)]
    assert status.lag is None


def test_status_json_and_a_fresh_backup_exits_0(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["status", "-p", str(store), "--max-age", "1h", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is True
    assert payload["breaches"] == []
    (backup,) = payload["backups"]
    assert (backup["backup_id"], backup["last_increment"], backup["records"]) == ("nightly", 1, 9)
    assert backup["partitions"][0]["first_time"] == "1970-01-01T00:00:01.000Z"
    assert backup["lag_records"] is None


def test_a_backup_older_than_max_age_exits_with_the_alert_code(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["status", "-p", str(store), "--max-age", "0.001s"]) == RecoveryPointAlert.exit_code
    captured = capsys.readouterr()
    assert "backup nightly in " in captured.out
    (alert,) = [line for line in captured.err.splitlines() if "alert" in line]
    assert alert.startswith("kafka-backup: alert: backup nightly: last increment 1 was committed ")


def test_bad_limits_are_refused(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A wrong value is exit 3 and a limit that needs what was not given exit 2 (docs/exit-codes.md).
    assert run(["status", "-p", str(store), "--max-age", "soon"]) == ConfigError.exit_code
    assert "--max-age soon: 'soon' is not a duration" in capsys.readouterr().err
    assert run(["status", "-p", str(store), "--max-lag", "10"]) == UsageError.exit_code
    assert "--max-lag reads the source" in capsys.readouterr().err


def _config(tmp_path: Path, store: Path) -> Path:
    # Nothing listens on port 1: the source is unreachable within the one-second timeout.
    path = tmp_path / "status.yaml"
    path.write_text(
        f"backup_id: nightly\nstorage:\n  url: {store}\n"
        "source:\n  bootstrap_servers: ['127.0.0.1:1']\n  connect_timeout_secs: 1\n"
    )
    return path


def test_an_unreachable_source_with_max_lag_is_an_error(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, store)
    assert run(["status", "-c", str(config), "--max-lag", "1000"]) == KafkaUnreachableError.exit_code
    assert "127.0.0.1:1" in capsys.readouterr().err


def test_an_unreachable_source_without_max_lag_shows_the_status(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, store)
    assert run(["status", "-c", str(config), "--max-age", "1h"]) == 0
    assert "behind the source: unknown" in capsys.readouterr().out


def test_breaches_in_json(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["status", "-p", str(store), "--max-age", "0.001s", "--json"]) == RecoveryPointAlert.exit_code
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False
    assert payload["limits"] == {"max_age_seconds": 0.001, "max_lag_records": None}
    (breach,) = payload["breaches"]
    assert (breach["backup_id"], breach["limit"], breach["allowed"]) == ("nightly", "max-age", 0.001)
    assert breach["excess"] == pytest.approx(breach["value"] - 0.001)
