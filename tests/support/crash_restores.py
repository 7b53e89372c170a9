"""A generated backup with holes, null keys and headers for the restore crash tests, and the
exactly-once check of what landed on the target.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbackup.format.origin import parse_origin
from kbackup.format.segments import SegmentLimits
from kbackup.restore.partitioner import partition_for_key, partition_for_null_key
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.kafka_io import consume_all
from tests.support.restore_checks import own_headers

NOW = int(time.time() * 1000)


SOURCE_PARTITIONS = 3


RECORDS_PER_PARTITION = 25_000


def source_records(partition: int, count: int = RECORDS_PER_PARTITION) -> Iterator[BackupRecord]:
    """Deterministic records with holes in the offsets, null keys, and some headers."""
    offset = 0
    for i in range(count):
        offset += 1 if i % 10 else 3  # holes, as compaction or transaction markers leave
        yield BackupRecord(
            offset=offset,
            key=None if i % 6 == 0 else b"key-%d-%d" % (partition, i % 1000),
            value=b"p%d-r%d-" % (partition, i) + b"x" * 120,
            headers=(("i", b"%d" % i),) if i % 4 == 0 else (),
            timestamp=NOW - 600_000 + i,
        )


def build_backup(
    root: Path,
    scratch: Path,
    topic: str,
    backup_id: str = "crash",
    per_partition: int = RECORDS_PER_PARTITION,
) -> dict[int, list[BackupRecord]]:
    """``backup_id``: restores of two backups of the same id into one cluster are the same restore
    (one transactional id, one progress): tests sharing a cluster give each its own."""
    storage = LocalStorage(root)
    builder = BackupBuilder(
        storage,
        backup_id,
        source_cluster="crash-src",
        scratch_dir=scratch,
        limits=SegmentLimits(max_records=10_000),
    )
    builder.topic(topic, SOURCE_PARTITIONS)
    for partition in range(SOURCE_PARTITIONS):
        builder.partition(topic, partition, source_records(partition, per_partition))
    builder.commit()
    return {p: list(source_records(p, per_partition)) for p in range(SOURCE_PARTITIONS)}


def landed(consumer: Consumer, topic: str, partitions: int) -> int:
    """Records on the target, committed or not (read_uncommitted end offsets); 0 before the topic exists."""
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions)
        )
    except KafkaException:
        return 0


def check_exactly_once(
    cluster: LocalKafkaCluster,
    topic: str,
    target_partitions: int,
    expected: dict[int, list[BackupRecord]],
    seed: int,
) -> None:
    restored = consume_all(cluster, topic, list(range(target_partitions)), timeout=120)
    by_source: dict[int, list[int]] = {p: [] for p in expected}
    where: dict[tuple[int, int], int] = {}
    payload: dict[
        tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]
    ] = {}
    for record in restored:  # sorted by (target partition, target offset)
        origin = parse_origin(record.headers)
        assert origin is not None, f"seed {seed}: record without origin {record}"
        by_source[origin.partition].append(origin.offset)
        where[(origin.partition, origin.offset)] = record.partition or 0
        payload[(origin.partition, origin.offset)] = (
            record.key,
            record.value,
            own_headers(record.headers),
            record.timestamp,
        )
    total = sum(len(records) for records in expected.values())
    assert len(restored) == total, f"seed {seed}: {len(restored)} records on the target, {total} expected"
    for partition, records in expected.items():
        offsets = [r.offset for r in records]
        found = by_source[partition]
        if target_partitions == SOURCE_PARTITIONS:
            # One target partition per source partition: exactly the source sequence, in order.
            assert found == offsets, (
                f"seed {seed}: source partition {partition} is not restored once, in order"
            )
        else:
            assert sorted(found) == offsets, f"seed {seed}: source partition {partition}: duplicates or gaps"
        for backed_up in records:
            key = (partition, backed_up.offset)
            assert payload[key] == (
                backed_up.key,
                backed_up.value,
                list(backed_up.headers),
                backed_up.timestamp,
            ), f"seed {seed}: {key}"
            if target_partitions != SOURCE_PARTITIONS:
                want = (
                    partition_for_key(backed_up.key, target_partitions)
                    if backed_up.key is not None
                    else partition_for_null_key(partition, backed_up.offset, target_partitions)
                )
                assert where[key] == want, f"seed {seed}: {key} in partition {where[key]}, not {want}"
    # Within each target partition, each source partition's records keep their order.
    last: dict[tuple[int | None, int], int] = {}
    for record in restored:
        origin = parse_origin(record.headers)
        assert origin is not None
        slot = (record.partition, origin.partition)
        assert origin.offset > last.get(slot, -1), f"seed {seed}: order broken at {origin}"
        last[slot] = origin.offset
