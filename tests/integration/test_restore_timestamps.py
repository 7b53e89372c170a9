"""Topics that use LogAppendTime: by default every restored record keeps its original timestamp.

The source topic uses ``message.timestamp.type: LogAppendTime``, so its records carry the times
its broker gave them. Copying that config onto the target would have the target's broker stamp
every restored record with the restore time: the restore creates such topics as CreateTime
(``restore.log_append_time: keep-original``), optionally switches them to LogAppendTime afterwards
(``switch-after``), and refuses an existing LogAppendTime topic unless told to accept rewritten
times (``rewrite``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kbackup.core.errors import PreconditionError
from kbackup.format.origin import parse_origin
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import LocalStorage
from tests.support.backup_builder import backup_from_cluster, topic_configs
from tests.support.cli_run import RunCli
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce
from tests.support.restore_checks import CONFLUENT_CREATE_TIME

CONFLUENT_LOG_APPEND_TIME = 2
LAT = {"message.timestamp.type": "LogAppendTime"}


def log_append_time_source(source: LocalKafkaCluster, topic: str, store: Path) -> list[Record]:
    """A LogAppendTime topic on the source, backed up to ``store`` (backup id ``lat``); its records."""
    create_topic(source, topic, 2, LAT)
    # The producer's timestamps are an hour old; the source's broker replaces them with its own time.
    produce(
        source,
        topic,
        [
            Record(
                key=b"k%d" % i,
                value=b"v%d" % i,
                timestamp=int(time.time() * 1000) - 3_600_000,
                partition=i % 2,
            )
            for i in range(40)
        ],
    )
    records = consume_all(source, topic, [0, 1])
    assert {r.timestamp_type for r in records} == {CONFLUENT_LOG_APPEND_TIME}
    backup_from_cluster(source, [topic], LocalStorage(store), "lat")
    return records


def restore_args(store: Path, target: LocalKafkaCluster, *extra: str) -> list[str]:
    return ["restore", "-p", str(store), "--backup-id", "lat", "-b", target.bootstrap_servers, *extra]


def assert_original_times(source: list[Record], restored: list[Record]) -> None:
    """Every restored record has its source record's timestamp, as CreateTime."""
    assert len(restored) == len(source)
    original = {(r.partition, r.offset): r.timestamp for r in source}
    for record in restored:
        origin = parse_origin(record.headers)
        assert origin is not None
        assert record.timestamp == original[(origin.partition, origin.offset)], record
        assert record.timestamp_type == CONFLUENT_CREATE_TIME, record


def test_log_append_time_topic_is_created_as_create_time_and_keeps_every_timestamp(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    topic = f"{unique_name}-lat"
    source = log_append_time_source(source_cluster, topic, tmp_path / "store")
    code, out, err = cli(*restore_args(tmp_path / "store", target_cluster, "--dry-run"))
    assert code == 0, err
    assert "'message.timestamp.type': 'CreateTime'" in out
    assert (
        f"warning: target topic {topic} is created with message.timestamp.type CreateTime instead of" in out
    )

    code, out, err = cli(*restore_args(tmp_path / "store", target_cluster, "--json"))
    assert code == 0, err
    assert json.loads(out)["records"] == 40
    assert topic_configs(target_cluster, topic)["message.timestamp.type"] == "CreateTime"
    assert_original_times(source, consume_all(target_cluster, topic, [0, 1]))


def test_switch_after_restores_original_times_then_switches_to_log_append_time(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    topic = f"{unique_name}-lat"
    source = log_append_time_source(source_cluster, topic, tmp_path / "store")
    args = restore_args(tmp_path / "store", target_cluster, "--log-append-time", "switch-after")
    code, out, err = cli(*args, "--dry-run")
    assert code == 0, err
    assert "40 record(s) from 2 partition(s); then switched to LogAppendTime" in out
    assert f"warning: target topic {topic} is switched to LogAppendTime once its records are restored" in out

    code, out, err = cli(*args, "--json")
    assert code == 0, err
    assert json.loads(out)["switched_to_log_append_time"] == [topic]
    assert topic_configs(target_cluster, topic)["message.timestamp.type"] == "LogAppendTime"
    assert_original_times(source, consume_all(target_cluster, topic, [0, 1]))
    # After the switch the broker stamps new records.
    produce(target_cluster, topic, [Record(key=b"new", value=b"n", timestamp=1_000_000, partition=0)])
    assert consume_all(target_cluster, topic, [0])[-1].timestamp_type == CONFLUENT_LOG_APPEND_TIME

    # Run again: nothing left to write, so the (now LogAppendTime) topic is not refused.
    code, out, err = cli(*args)
    assert code == 0, err
    assert "restored 0 record(s)" in out


def test_existing_log_append_time_topic_is_refused_unless_rewrite(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    topic = f"{unique_name}-lat"
    source = log_append_time_source(source_cluster, topic, tmp_path / "store")
    create_topic(target_cluster, topic, 2, LAT)
    refusal = (
        f"kafka-backup: error: target topic '{topic}' exists with message.timestamp.type LogAppendTime: the "
        "broker would stamp every restored record with the restore time instead of its original timestamp"
    )
    for extra in (["--dry-run"], [], ["--log-append-time", "switch-after"]):
        code, _out, err = cli(*restore_args(tmp_path / "store", target_cluster, *extra))
        assert code == PreconditionError.exit_code, (extra, err)
        assert err.splitlines()[0] == refusal
        assert "restore.log_append_time: rewrite" in err
        assert "message.timestamp.type=CreateTime" in err
    assert end_offsets(target_cluster, topic, [0, 1]) == {0: 0, 1: 0}

    code, out, err = cli(*restore_args(tmp_path / "store", target_cluster, "--log-append-time", "rewrite"))
    assert code == 0, err
    assert f"warning: target topic {topic} uses LogAppendTime (restore.log_append_time: rewrite)" in out
    restored = consume_all(target_cluster, topic, [0, 1])
    assert len(restored) == len(source)
    assert {r.timestamp_type for r in restored} == {CONFLUENT_LOG_APPEND_TIME}
