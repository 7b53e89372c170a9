"""Restores into the real target cluster, checked record by record against the real source topics.

Each test produces topics on the source cluster, backs them up as the backup
stage would (committed records, through the format writer), restores them, and
compares: payload, own headers, timestamps, origin headers, partition, order.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import ConfigError
from kbackup.format.segments import SegmentLimits
from kbackup.restore.partitioner import partition_for_key, partition_for_null_key
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import LocalStorage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_builder import backup_from_cluster, partition_count, topic_configs
from tests.support.config_files import config_file
from tests.support.folders import files_under
from tests.support.kafka_io import Record, admin, consume_all, create_topic, produce
from tests.support.restore_checks import assert_restored_exactly, restore

NOW = int(time.time() * 1000)


def varied_records(count: int, partitions: int) -> list[Record]:
    """Headers (repeated names, null and binary values, a stale origin header), null keys and values."""
    records = []
    for i in range(count):
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("trace", b"t-%d" % i), ("trace", None), ("bin", bytes([0, 255, i % 256])))
        if i % 7 == 0:
            # As in a backup of an already restored topic: replaced by this restore's origin.
            headers = (*headers, ("x-kafka-backup-offset", b"424242"), ("x-kafka-backup-cluster", b"older"))
        records.append(
            Record(
                key=None if i % 5 == 0 else b"key-%d" % (i % 37),
                value=None if i % 11 == 0 else b"value-%d-" % i + b"\x00" * (i % 13),
                headers=headers,
                timestamp=NOW - 3_600_000 + i * 17 - (5000 if i % 9 == 0 else 0),  # not monotonic
                partition=i % partitions,
            )
        )
    return records


def test_headers_nulls_and_timestamps_restore_exactly_from_s3(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    unique_name: str,
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 3)
    produce(source_cluster, topic, varied_records(900, 3))
    storage = StorageSettings.model_validate(s3_server.storage_settings(TEST_BUCKET, unique_name))
    backup_from_cluster(
        source_cluster, [topic], open_storage(storage), "nightly", limits=SegmentLimits(max_records=100)
    )
    summary = restore(target_cluster, storage, "nightly")
    assert summary.mode == "exactly-once"
    assert summary.records == 900
    assert summary.verified
    assert summary.created_topics[0] == topic
    source = consume_all(source_cluster, topic, [0, 1, 2])
    restored = consume_all(target_cluster, topic, [0, 1, 2])
    assert_restored_exactly(source, restored, source_cluster=source_cluster.cluster_id)
    # Dense on the target: the restored partition holds exactly the backed-up records, in order.
    for partition in range(3):
        offsets = [r.offset for r in restored if r.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_transactional_topic_with_aborted_records_and_holes(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-tx"
    create_topic(source_cluster, topic, 2)
    producer = Producer(
        {"bootstrap.servers": source_cluster.bootstrap_servers, "transactional.id": unique_name}
    )
    producer.init_transactions(30)
    for round_ in range(6):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(
                topic, b"r%d-%d" % (round_, i), b"k%d" % i, partition=i % 2, timestamp=NOW - 1000 + i
            )
        if round_ % 3 == 1:
            # Delivered first: the aborted records are in the log (holes and markers), and an
            # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    source = consume_all(source_cluster, topic, [0, 1])
    assert len(source) == 4 * 50
    assert not any(r.value and r.value.startswith((b"r1-", b"r4-")) for r in source)
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "tx")
    summary = restore(target_cluster, tmp_path / "store", "tx", topic_mapping={topic: f"{topic}-restored"})
    assert summary.records == 200
    restored = consume_all(target_cluster, f"{topic}-restored", [0, 1])
    assert_restored_exactly(source, restored, source_cluster=source_cluster.cluster_id)
    # The source offsets have holes (markers, aborted records); the origin headers keep them.
    origin_offsets = sorted(r.offset or 0 for r in source if r.partition == 0)
    assert origin_offsets[-1] - origin_offsets[0] + 1 > len(origin_offsets)


def test_compacted_topic(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-compact"
    create_topic(
        source_cluster,
        topic,
        1,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    produce(
        source_cluster,
        topic,
        [
            Record(
                key=b"k%d" % (i % 20), value=None if i % 50 == 49 else b"v%d" % i, timestamp=NOW - 9000 + i
            )
            for i in range(400)
        ],
    )
    time.sleep(0.3)
    produce(source_cluster, topic, [Record(key=b"roll", value=b"x", timestamp=NOW)])
    deadline = time.monotonic() + 60
    while len(consume_all(source_cluster, topic)) == 401:
        assert time.monotonic() < deadline, "the source's log cleaner did not compact the topic"
        time.sleep(0.5)
    source = consume_all(source_cluster, topic)
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "compact")
    summary = restore(target_cluster, tmp_path / "store", "compact")
    assert summary.records == len(source)
    restored = consume_all(target_cluster, topic)
    assert_restored_exactly(source, restored, source_cluster=source_cluster.cluster_id)
    assert topic_configs(target_cluster, topic)["cleanup.policy"] == "compact"


def test_large_records_with_copied_max_message_bytes(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-large"
    create_topic(source_cluster, topic, 1, {"max.message.bytes": str(4 * 1024 * 1024)})
    large = [
        Record(
            key=b"big-%d" % i,
            value=bytes([i]) * (3 * 1024 * 1024 + i),
            headers=(("n", b"%d" % i),),
            timestamp=NOW - 100 + i,
        )
        for i in range(4)
    ]
    produce(source_cluster, topic, large, **{"message.max.bytes": 8 * 1024 * 1024})
    source = consume_all(source_cluster, topic)
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "large")
    summary = restore(target_cluster, tmp_path / "store", "large")
    assert summary.records == 4
    assert topic_configs(target_cluster, topic)["max.message.bytes"] == str(4 * 1024 * 1024)
    assert_restored_exactly(
        source, consume_all(target_cluster, topic), source_cluster=source_cluster.cluster_id
    )


@pytest.mark.parametrize(("source_partitions", "target_partitions"), [(3, 6), (6, 3)])
def test_repartition_by_key_like_the_java_producer(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    source_partitions: int,
    target_partitions: int,
) -> None:
    topic = f"{unique_name}-rp"
    create_topic(source_cluster, topic, source_partitions)
    produce(source_cluster, topic, varied_records(1200, source_partitions))
    source = consume_all(source_cluster, topic, list(range(source_partitions)))
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "rp")
    summary = restore(
        target_cluster,
        tmp_path / "store",
        "rp",
        repartition=True,
        target_partitions={topic: target_partitions},
    )
    assert summary.records == 1200
    assert partition_count(target_cluster, topic) == target_partitions
    restored = consume_all(target_cluster, topic, list(range(target_partitions)))

    def where(record: Record) -> int:
        if record.key is not None:
            return partition_for_key(record.key, target_partitions)
        return partition_for_null_key(record.partition or 0, record.offset or 0, target_partitions)

    assert_restored_exactly(
        source, restored, source_cluster=source_cluster.cluster_id, target_partition_of=where
    )
    # Null keys are spread over every target partition.
    assert {r.partition for r in restored if r.key is None} == set(range(target_partitions))


def test_murmur2_predicts_librdkafka_java_compatible_partitioner(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    """librdkafka's murmur2_random is documented as the Java producer's default; we must agree with it."""
    partitions = 7
    create_topic(target_cluster, unique_name, partitions)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", *(b"customer-%d" % i for i in range(500)), bytes(range(256))]
    produce(
        target_cluster,
        unique_name,
        [Record(key=key, value=b"v") for key in keys],
        partitioner="murmur2_random",
    )
    landed = consume_all(target_cluster, unique_name, list(range(partitions)))
    assert len(landed) == len(keys)
    for record in landed:
        assert record.key is not None
        assert record.partition == partition_for_key(record.key, partitions), record.key


def test_topic_rename_into_existing_topic_time_window_and_offset_range(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 2)
    records = [
        Record(key=b"k%d" % i, value=b"v%d" % i, timestamp=NOW - 100_000 + i * 100, partition=i % 2)
        for i in range(1000)
    ]
    produce(source_cluster, topic, records)
    source = consume_all(source_cluster, topic, [0, 1])
    backup_from_cluster(
        source_cluster, [topic], LocalStorage(tmp_path / "store"), "w", limits=SegmentLimits(max_records=64)
    )
    renamed = f"{unique_name}-renamed"
    create_topic(target_cluster, renamed, 2)
    start, end = NOW - 100_000 + 20_000, NOW - 100_000 + 60_000
    summary = restore(
        target_cluster,
        tmp_path / "store",
        "w",
        topic_mapping={topic: renamed},
        time_window_start=start,
        time_window_end=end,
        offset_ranges={topic: {1: {"start": 150, "end": 250}}},
    )
    expected = [
        r
        for r in source
        if start <= (r.timestamp or 0) < end and (r.partition == 0 or 150 <= (r.offset or 0) < 250)
    ]
    assert renamed not in summary.created_topics
    assert summary.records == len(expected)
    assert summary.verified
    restored = consume_all(target_cluster, renamed, [0, 1])
    assert_restored_exactly(expected, restored, source_cluster=source_cluster.cluster_id)
    assert all(r.topic == renamed for r in restored)


def test_log_append_time_target_is_warned_and_headers_keep_the_original_time(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 1)
    produce(
        source_cluster,
        topic,
        [Record(key=None, value=b"v%d" % i, timestamp=NOW - 50_000 + i) for i in range(20)],
    )
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "lat")
    create_topic(target_cluster, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    summary = restore(target_cluster, tmp_path / "store", "lat", log_append_time="rewrite")
    assert any(f"target topic {topic} uses LogAppendTime" in w for w in summary.warnings)
    restored = consume_all(target_cluster, topic)
    assert len(restored) == 20
    from kbackup.format.origin import parse_origin

    for record in restored:
        origin = parse_origin(record.headers)
        assert origin is not None
        assert record.timestamp != origin.timestamp  # rewritten by the broker
        assert origin.timestamp == NOW - 50_000 + origin.offset


def test_origin_headers_off(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 1)
    produce(source_cluster, topic, varied_records(50, 1))
    source = consume_all(source_cluster, topic)
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "noh")
    summary = restore(target_cluster, tmp_path / "store", "noh", include_original_offset_header=False)
    assert any("header-based offset translation" in w for w in summary.warnings)
    restored = consume_all(target_cluster, topic)
    # Records are restored exactly as they were, their own headers untouched (stale ones included).
    assert [(r.key, r.value, r.headers, r.timestamp) for r in restored] == [
        (r.key, r.value, r.headers, r.timestamp) for r in source
    ]


def test_backup_taken_without_offset_headers_restores_without_them_unless_asked(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``backup.include_offset_headers: false`` is the restore's default; ``--origin-headers`` wins;
    the three-phase restore and the drill, which move groups by the headers, refuse before they change
    anything."""
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 2)
    produce(
        source_cluster,
        topic,
        [
            Record(key=b"k%d" % i, value=b"v%d" % i, headers=(("app", b"own"),), partition=i % 2)
            for i in range(40)
        ],
    )
    source = consume_all(source_cluster, topic, [0, 1])
    store = tmp_path / "store"
    document = {
        "backup_id": "noh",
        "source": {"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        "target": {"bootstrap_servers": [target_cluster.bootstrap_servers]},
        "storage": {"url": str(store)},
        "backup": {"include_offset_headers": False},
        "restore": {"topic_mapping": {topic: f"{topic}-default"}},
        "three_phase": {"state_dir": str(tmp_path / "state")},
        "offset_reset": {"snapshot_dir": str(tmp_path / "snapshots")},
    }
    config = config_file(tmp_path / "noh.yaml", **document)
    c = ["-c", str(config)]
    assert run(["backup", *c]) == 0
    capsys.readouterr()

    assert run(["restore", *c, "--dry-run"]) == 0
    assert "  origin headers: off (backup taken with backup.include_offset_headers: false)" in (
        capsys.readouterr().out.splitlines()
    )
    assert run(["restore", *c]) == 0
    # Restored as they were: own headers kept, no x-kafka-backup-* added.
    plain = consume_all(target_cluster, f"{topic}-default", [0, 1])
    assert [(r.partition, r.key, r.value, r.headers, r.timestamp) for r in plain] == [
        (r.partition, r.key, r.value, r.headers, r.timestamp) for r in source
    ]
    assert run(["restore", *c, "--origin-headers", "--topic-mapping", f"{topic}={topic}-stamped"]) == 0
    stamped = consume_all(target_cluster, f"{topic}-stamped", [0, 1])
    assert_restored_exactly(source, stamped, source_cluster=source_cluster.cluster_id)

    capsys.readouterr()
    drill_config = config_file(tmp_path / "drill.yaml", **{**document, "backup_id": "noh-drill"})
    topics_before = set(admin(target_cluster).list_topics(timeout=10).topics)
    files_before = files_under(tmp_path)
    for command in (["three-phase-restore", *c], ["drill", "-c", str(drill_config)]):
        assert run(command) == ConfigError.exit_code, command
        error = capsys.readouterr().err.splitlines()[0]
        assert error == (
            f"kafka-backup: error: {command[0]} needs x-kafka-backup-* origin headers on the restored "
            "records, but backup.include_offset_headers is false and restore.include_original_offset_header "
            "is unset"
        )
    # Nothing was touched: no topic created on the target, no state, snapshot or backup written.
    assert set(admin(target_cluster).list_topics(timeout=10).topics) == topics_before
    assert files_under(tmp_path) == files_before


def test_rerun_after_the_target_topic_was_deleted_restores_it_again(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 2)
    produce(source_cluster, topic, varied_records(200, 2))
    source = consume_all(source_cluster, topic, [0, 1])
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "again")
    first = restore(target_cluster, tmp_path / "store", "again")
    assert first.records == 200
    # The same command again: everything is already there.
    assert restore(target_cluster, tmp_path / "store", "again").records == 0
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    again = restore(target_cluster, tmp_path / "store", "again")
    assert again.records == 200
    assert any(f"target topic {topic} holds fewer records than earlier runs" in w for w in again.warnings)
    assert_restored_exactly(
        source, consume_all(target_cluster, topic, [0, 1]), source_cluster=source_cluster.cluster_id
    )


def test_explicit_partition_map_into_fewer_partitions(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-src"
    create_topic(source_cluster, topic, 3)
    produce(source_cluster, topic, varied_records(300, 3))
    source = consume_all(source_cluster, topic, [0, 1, 2])
    backup_from_cluster(source_cluster, [topic], LocalStorage(tmp_path / "store"), "map")
    create_topic(target_cluster, topic, 2)
    summary = restore(target_cluster, tmp_path / "store", "map", partition_mapping={topic: {2: 0}})
    assert summary.records == 300
    restored = consume_all(target_cluster, topic, [0, 1])
    assert_restored_exactly(
        source,
        restored,
        source_cluster=source_cluster.cluster_id,
        target_partition_of=lambda r: {0: 0, 1: 1, 2: 0}[r.partition or 0],
    )
