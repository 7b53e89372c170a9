"""``kafka-backup status`` on fresh, stale and lagging backups of a real cluster, and a real backup's
``--log-format json`` lines (issue 21)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]  # not in its stubs

from kbackup.cli.main import run
from kbackup.core.errors import PreconditionError, RecoveryPointAlert
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.kafka_io import Record, admin, create_topic, end_offsets, produce

ROOT = Path(__file__).parents[2]
#: 2023 timestamps with retention off: nothing is deleted while the test runs.
BASE_TIME = 1_700_000_000_000


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def backed_up_topic(cluster: LocalKafkaCluster, topic: str, store: Path, records: int = 20) -> None:
    """A two-partition topic of ``records`` records, backed up as ``nightly``: increment 0."""
    create_topic(cluster, topic, partitions=2, config={"retention.ms": "-1"})
    produce(
        cluster,
        topic,
        [Record(key=b"k", value=b"v", partition=i % 2, timestamp=BASE_TIME + i) for i in range(records)],
    )
    summary = take_backup(cluster, store, "nightly", [topic])
    assert summary.records == records


def alerts(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kafka-backup: alert: ")]


def test_a_fresh_backup_passes_and_shows_its_recovery_point(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backed_up_topic(source_cluster, unique_name, tmp_path)
    servers = source_cluster.bootstrap_servers
    args = ["-p", str(tmp_path), "--backup-id", "nightly", "-b", servers, "--max-age", "1h", "--max-lag", "0"]
    code, out, err = status(capsys, *args, "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["ok"] is True
    assert payload["breaches"] == []
    (backup,) = payload["backups"]
    assert (backup["backup_id"], backup["increments"], backup["last_increment"]) == ("nightly", 1, 0)
    assert backup["records"] == 20
    assert backup["bytes"] > 0
    assert 0 <= backup["age_seconds"] < 600
    assert backup["last_committed_at"].endswith("Z")
    assert backup["source_checked"] == servers
    assert backup["lag_records"] == 0
    assert backup["kafka_cluster_id"] == source_cluster.cluster_id
    windows = [
        (p["partition"], p["first_offset"], p["last_offset"], p["records"], p["backed_up_end_offset"])
        for p in backup["partitions"]
    ]
    assert windows == [(0, 0, 9, 10, 10), (1, 0, 9, 10, 10)]
    first = backup["partitions"][0]
    assert (first["first_time"], first["last_time"]) == (
        "2023-11-14T22:13:20.000Z",
        "2023-11-14T22:13:20.018Z",
    )
    assert [p["live_end_offset"] for p in backup["partitions"]] == [10, 10]
    assert [p["lag_records"] for p in backup["partitions"]] == [0, 0]
    code, out, err = status(capsys, *args)
    assert code == 0, err
    assert alerts(err) == []
    times = "time 2023-11-14T22:13:20.001Z to 2023-11-14T22:13:20.019Z"
    assert f"{unique_name}/1: offsets 0 to 9, {times}" in out
    assert f"behind the source ({servers}): 0 record(s)" in out


def test_a_stale_backup_breaches_max_age(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backed_up_topic(source_cluster, unique_name, tmp_path)
    args = ["-p", str(tmp_path), "--backup-id", "nightly", "--max-age", "1s"]
    # Polled, not slept: status answers 0 until the backup is a second old, then alerts.
    deadline = time.monotonic() + 30
    while (outcome := status(capsys, *args))[0] == 0:
        assert time.monotonic() < deadline, outcome
        time.sleep(0.1)
    code, out, err = outcome
    assert code == RecoveryPointAlert.exit_code, err
    (line,) = alerts(err)
    assert line.startswith("kafka-backup: alert: backup nightly: last increment 0 was committed ")
    assert "over --max-age 1s" in line
    code, out, err = status(capsys, *args, "--json", "-b", source_cluster.bootstrap_servers, "--max-lag", "0")
    assert code == RecoveryPointAlert.exit_code, err
    payload = json.loads(out)
    assert payload["ok"] is False
    # The lag is 0: only the age breaches.
    (breach,) = payload["breaches"]
    assert (breach["backup_id"], breach["limit"], breach["allowed"]) == ("nightly", "max-age", 1)
    assert breach["value"] > 1
    assert breach["excess"] == pytest.approx(breach["value"] - 1)
    assert payload["backups"][0]["age_seconds"] == pytest.approx(breach["value"], abs=0.01)
    # A limit above the age passes.
    code, _, err = status(capsys, *args[:-1], "1h")
    assert code == 0, err


def test_a_lagging_backup_breaches_max_lag(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backed_up_topic(source_cluster, unique_name, tmp_path)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"late", partition=1)] * 7)
    # A partition added after the backup is behind by everything it holds.
    client = admin(source_cluster)  # must outlive the future: a collected client cancels it
    client.create_partitions([NewPartitions(unique_name, 3)])[unique_name].result(30)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"new", partition=2)] * 4)
    assert end_offsets(source_cluster, unique_name, [0, 1, 2]) == {0: 10, 1: 17, 2: 4}
    args = ["-p", str(tmp_path), "--backup-id", "nightly", "-b", source_cluster.bootstrap_servers]
    code, out, err = status(capsys, *args, "--max-lag", "5", "--max-age", "1h", "--json")
    assert code == RecoveryPointAlert.exit_code, err
    payload = json.loads(out)
    (backup,) = payload["backups"]
    assert backup["lag_records"] == 11
    rows = [
        (p["partition"], p["records"], p["live_end_offset"], p["lag_records"]) for p in backup["partitions"]
    ]
    assert rows == [(0, 10, 10, 0), (1, 10, 17, 7), (2, 0, 4, 4)]
    assert backup["partitions"][2]["first_offset"] is None
    (breach,) = payload["breaches"]
    assert (breach["limit"], breach["value"], breach["allowed"], breach["excess"]) == ("max-lag", 11, 5, 6)
    code, out, err = status(capsys, *args, "--max-lag", "5")
    assert code == RecoveryPointAlert.exit_code
    assert alerts(err) == [
        "kafka-backup: alert: backup nightly: 11 record(s) behind the source, 6 over --max-lag 5; "
        f"most behind: {unique_name}/1 by 7"
    ]
    assert f"{unique_name}/1: offsets 0 to 9, " in out
    assert f"{unique_name}/2: no records, 0 records, behind 4" in out
    # The limit itself is not a breach; a backup that caught up passes.
    assert status(capsys, *args, "--max-lag", "11")[0] == 0
    take_backup(source_cluster, tmp_path, "nightly", [unique_name])
    code, out, err = status(capsys, *args, "--max-lag", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["backups"][0]["lag_records"] == 0


def test_lag_against_another_cluster_is_refused(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backed_up_topic(source_cluster, unique_name, tmp_path, records=4)
    args = ["-p", str(tmp_path), "--backup-id", "nightly", "-b", target_cluster.bootstrap_servers]
    code, _, err = status(capsys, *args, "--max-lag", "100")
    assert code == PreconditionError.exit_code
    assert f"was taken from cluster {source_cluster.cluster_id}" in err
    # Without --max-lag the status is still shown, with the reason the lag is unknown.
    code, out, err = status(capsys, *args, "--json")
    assert code == 0, err
    (backup,) = json.loads(out)["backups"]
    assert backup["lag_records"] is None
    assert target_cluster.cluster_id in backup["lag_unknown_reason"]


def json_logged(*args: str) -> list[dict[str, Any]]:
    """Run ``kafka-backup -v --log-format json ARGS`` in a new process; its stderr lines, parsed."""
    done = subprocess.run(
        [sys.executable, "-m", "kbackup", "-v", "--log-format", "json", *args],
        cwd=ROOT,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert events
    for event in events:
        assert {"time", "level", "logger", "message"} <= set(event), event
        assert event["time"].endswith("Z")
        assert event["logger"].startswith("kbackup")
    return events


def test_log_format_json_lines_of_a_real_backup_and_restore(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(6)])
    events = json_logged(
        "backup",
        "-b",
        source_cluster.bootstrap_servers,
        "--include",
        unique_name,
        "--path",
        str(tmp_path),
        "--backup-id",
        "nightly",
    )
    committed = [e for e in events if e["message"].startswith("committed increment 0 of nightly")]
    assert len(committed) == 1
    assert (committed[0]["backup_id"], committed[0]["increment"], committed[0]["records"]) == (
        "nightly",
        0,
        6,
    )
    assert committed[0]["level"] == "INFO"
    copied = sorted((e["topic"], e["partition"]) for e in events if e.get("end_offset") is not None)
    assert copied == [(unique_name, 0), (unique_name, 1)]
    assert all(e["backup_id"] == "nightly" for e in events if "topic" in e)
    started = [e for e in events if e["message"].startswith("backing up 1 topic(s)")]
    assert started[0]["increment"] == 0
    assert started[0]["topics"] == [unique_name]

    events = json_logged(
        "restore", "-p", str(tmp_path), "--backup-id", "nightly", "-b", target_cluster.bootstrap_servers
    )
    restored = [e for e in events if "restored to" in e["message"]]
    assert sorted((e["topic"], e["partition"], e["target_topic"]) for e in restored) == [
        (unique_name, 0, unique_name),
        (unique_name, 1, unique_name),
    ]
    assert {e["backup_id"] for e in restored} == {"nightly"}
    assert len({e["restore_id"] for e in events if "restore_id" in e}) == 1
