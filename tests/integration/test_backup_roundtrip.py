"""A backup holds exactly what the source cluster holds, record for record, on a folder and on S3."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, source_clusters_in, take_backup
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce

ONE_MIB = 1024 * 1024


RECENT_MS = int(time.time() * 1000) - 3_600_000


def varied_records(partitions: list[int]) -> list[Record]:
    """Keyed and unkeyed records, null values, binary/duplicate/null headers, explicit timestamps."""
    records = []
    for i in range(120):
        partition = partitions[i % len(partitions)]
        key = None if i % 4 == 0 else f"key-{i % 13}".encode()
        value = None if i % 9 == 0 else bytes((i * 7 + j) % 256 for j in range(i % 40))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("trace", b"\x00\x01\xff"), ("trace", b"\x00\x01\xff"), ("empty", None), ("dup", b"a"))
        elif i % 5 == 0:
            headers = (("only", b""),)
        records.append(
            Record(
                key=key,
                value=value,
                headers=headers,
                # Recent: the topic's 1-day retention must not delete them while the test runs.
                timestamp=RECENT_MS + i * 1000,
                partition=partition,
            )
        )
    return records


@pytest.fixture(params=["folder", "s3"])
def storage_settings(request: pytest.FixtureRequest, tmp_path: Path) -> StorageSettings:
    if request.param == "folder":
        return StorageSettings(url=str(tmp_path / "backups"))
    server: S3Server = request.getfixturevalue("s3_server")
    return StorageSettings.model_validate(server.storage_settings(TEST_BUCKET, f"rt-{uuid.uuid4().hex[:8]}"))


def test_backup_equals_what_the_cluster_holds(
    source_cluster: LocalKafkaCluster, unique_name: str, storage_settings: StorageSettings
) -> None:
    topic = f"{unique_name}-orders"
    big_topic = f"{unique_name}-big"
    append_topic = f"{unique_name}-append"
    # Partition 3 stays empty.
    # The records carry 2023 timestamps: time-based retention must not delete them.
    create_topic(source_cluster, topic, partitions=4, config={"retention.ms": "-1"})
    create_topic(source_cluster, big_topic, partitions=1, config={"max.message.bytes": str(3 * ONE_MIB)})
    create_topic(
        source_cluster, append_topic, partitions=1, config={"message.timestamp.type": "LogAppendTime"}
    )
    produce(source_cluster, topic, varied_records([0, 1, 2]))
    # Records near and at 1 MiB (the topic and producer allow up to 3 MiB).
    big = [
        Record(key=b"big-1", value=bytes(range(256)) * (ONE_MIB // 256)),
        Record(key=b"big-2", value=b"\xff" * (ONE_MIB - 100), headers=(("h", b"x" * 1000),)),
        Record(key=None, value=b"small"),
    ]
    produce(source_cluster, big_topic, big, **{"message.max.bytes": 3 * ONE_MIB})
    produce(source_cluster, append_topic, [Record(key=b"k", value=b"v", timestamp=1_000)] * 5)

    summary = take_backup(
        source_cluster, storage_settings, "rt", [f"{unique_name}-.*"], source_cluster_id="prod-east"
    )

    expected = (
        consume_all(source_cluster, topic, [0, 1, 2, 3])
        + consume_all(source_cluster, big_topic)
        + consume_all(source_cluster, append_topic)
    )
    backed_up = read_backup(storage_settings, "rt")
    assert len(backed_up) == 120 + 3 + 5
    assert sorted(backed_up, key=lambda r: (r.topic, r.partition, r.offset)) == sorted(
        expected, key=lambda r: (r.topic, r.partition, r.offset)
    )
    # LogAppendTime records keep the broker's time and type, not the producer's timestamp.
    appended = [r for r in backed_up if r.topic == append_topic]
    assert {r.timestamp_type for r in appended} == {2}  # confluent-kafka's LogAppendTime
    assert all(r.timestamp != 1_000 for r in appended)
    assert source_clusters_in(storage_settings, "rt") == {"prod-east"}
    assert summary.records == 128

    manifest = BackupCatalog(open_storage(storage_settings)).load("rt").latest
    ends = end_offsets(source_cluster, topic, [0, 1, 2, 3])
    ranges = {
        (p.topic, p.partition): (p.start_offset, p.end_offset, p.record_count) for p in manifest.partitions
    }
    for partition in range(4):
        count = sum(1 for r in expected if r.topic == topic and r.partition == partition)
        assert ranges[(topic, partition)] == (0, ends[partition], count)
    assert ranges[(topic, 3)] == (0, 0, 0)
    assert not [s for s in manifest.segments if s.topic == topic and s.partition == 3]
    topics = {entry.name: entry for entry in manifest.topics}
    assert topics[topic].partitions == 4
    assert topics[topic].configs["retention.ms"] == "-1"
    assert topics[append_topic].configs["message.timestamp.type"] == "LogAppendTime"
    assert topics[big_topic].topic_id
    assert manifest.source.cluster_id == "prod-east"
    assert manifest.source.kafka_cluster_id == source_cluster.cluster_id
    assert manifest.settings["isolation_level"] == "read_committed"


def test_small_segments_split_a_partition_and_read_back_in_order(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name, partitions=1)
    produce(source_cluster, unique_name, [Record(key=str(i).encode(), value=b"v" * 50) for i in range(1000)])
    take_backup(source_cluster, tmp_path, "seg", [unique_name], segment_max_records=300)
    manifest = BackupCatalog(open_storage(str(tmp_path))).load("seg").latest
    assert [s.record_count for s in manifest.segments] == [300, 300, 300, 100]
    assert [s.first_offset for s in manifest.segments] == [0, 300, 600, 900]
    assert read_backup(tmp_path, "seg") == consume_all(source_cluster, unique_name)


def test_topic_with_many_partitions(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    partitions = 48
    create_topic(source_cluster, unique_name, partitions=partitions)
    # Every partition gets records except the last four, which stay empty.
    records = [
        Record(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % (partitions - 4))
        for i in range(600)
    ]
    produce(source_cluster, unique_name, records)
    summary = take_backup(
        source_cluster, tmp_path, "many", [unique_name], buffer_memory_bytes=4 * ONE_MIB, max_open_segments=8
    )
    assert summary.partitions == partitions
    expected = consume_all(source_cluster, unique_name, list(range(partitions)))
    assert read_backup(tmp_path, "many") == expected
    manifest = BackupCatalog(open_storage(str(tmp_path))).load("many").latest
    assert len(manifest.partitions) == partitions
    assert sum(p.record_count for p in manifest.partitions) == 600
