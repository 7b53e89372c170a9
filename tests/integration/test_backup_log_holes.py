"""Logs with holes: compacted topics after the cleaner ran, and transactions (committed and aborted).

The backup keeps every offset as the source has it; holes stay holes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup, take_backup
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce
from tests.support.log_shapes import COMPACT_FAST


def wait_for_compaction(
    cluster: LocalKafkaCluster, topic: str, total: int, timeout: float = 90
) -> list[Record]:
    """Keep writing a record now and then (rolling segments) until the cleaner removed offsets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = consume_all(cluster, topic)
        if len(records) < total:
            return records
        time.sleep(1)
        # The active segment is never cleaned: a new record lets the previous one roll.
        produce(cluster, topic, [Record(key=b"roll", value=b"x")])
        total += 1
    raise AssertionError(f"the log cleaner did not compact {topic} within {timeout}s")


def test_compacted_topic_with_tombstones_after_cleaning(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name, config=COMPACT_FAST)
    records = [Record(key=f"k{i % 5}".encode(), value=f"v{i}".encode()) for i in range(40)]
    records += [Record(key=b"k1", value=None), Record(key=b"k3", value=None)]  # tombstones
    produce(source_cluster, unique_name, records)
    compacted = wait_for_compaction(source_cluster, unique_name, len(records))
    offsets = [r.consumed_offset for r in compacted]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets))), "expected holes after compaction"
    assert any(r.value is None for r in compacted), "tombstones are still in the log"

    take_backup(source_cluster, tmp_path, "compacted", [unique_name])

    held = consume_all(source_cluster, unique_name)
    backed_up = read_backup(tmp_path, "compacted")
    assert backed_up == held
    assert [r.offset for r in backed_up] == [r.offset for r in held]
    assert {r.key for r in backed_up if r.value is None} >= {b"k1", b"k3"}
    entry = BackupCatalog(open_storage(str(tmp_path))).load("compacted").latest.partitions[0]
    assert entry.end_offset == end_offsets(source_cluster, unique_name, [0])[0]
    assert entry.record_count == len(held) < entry.end_offset - entry.start_offset


def transactional_producer(cluster: LocalKafkaCluster, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    return producer


def send_transaction(producer: Producer, topic: str, values: list[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, key=b"k", value=value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        # Delivered first: the aborted records are in the log (holes and markers), and an
        # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
        producer.flush(30)
        producer.abort_transaction(30)


def wait_until_stable(cluster: LocalKafkaCluster, topic: str, timeout: float = 30) -> int:
    """Transaction markers are written after commit/abort returns: wait until the last stable
    offset (read_committed end) reaches the high watermark, and return it."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + timeout
    specs: Any = OffsetSpec  # its factory methods are untyped
    while True:
        stable = client.list_offsets({tp: specs.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
        high = client.list_offsets({tp: specs.latest()}, isolation_level=IsolationLevel.READ_UNCOMMITTED)
        stable_offset, high_offset = stable[tp].result(10).offset, high[tp].result(10).offset
        if stable_offset == high_offset:
            return int(stable_offset)
        assert time.monotonic() < deadline, f"{topic}: last stable offset stuck at {stable_offset}"
        time.sleep(0.1)


def test_transactional_topic_keeps_only_committed_records(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name)
    producer = transactional_producer(source_cluster, unique_name)
    send_transaction(producer, unique_name, [b"c1-a", b"c1-b", b"c1-c"], commit=True)
    send_transaction(producer, unique_name, [b"a1-a", b"a1-b"], commit=False)
    produce(source_cluster, unique_name, [Record(key=b"plain", value=b"non-transactional")])
    send_transaction(producer, unique_name, [b"c2-a", b"c2-b"], commit=True)
    # The log ends with an aborted transaction and its marker: nothing after them is delivered.
    send_transaction(producer, unique_name, [b"a2-a", b"a2-b", b"a2-c"], commit=False)
    assert wait_until_stable(source_cluster, unique_name) == 15

    # A run waiting for records that never come (past the marker at the end) would be failed by its
    # stall check: no record and no broker answer for stall_timeout_secs while records seem due.
    summary = take_backup(source_cluster, tmp_path, "txn", [unique_name], stall_timeout_secs=10)
    assert not summary.stopped_early

    committed = consume_all(source_cluster, unique_name, isolation_level="read_committed")
    backed_up = read_backup(tmp_path, "txn")
    assert backed_up == committed
    assert [r.value for r in backed_up] == [b"c1-a", b"c1-b", b"c1-c", b"non-transactional", b"c2-a", b"c2-b"]
    # Original offsets: 0-2, marker 3, aborted 4-5, marker 6, plain 7, 8-9, marker 10.
    assert [r.offset for r in backed_up] == [0, 1, 2, 7, 8, 9]
    entry = BackupCatalog(open_storage(str(tmp_path))).load("txn").latest.partitions[0]
    assert entry.end_offset == end_offsets(source_cluster, unique_name, [0])[0] == 15
    assert entry.record_count == 6

    # read_uncommitted (on request) copies the aborted records too, still at their offsets.
    take_backup(source_cluster, tmp_path, "txn-all", [unique_name], isolation_level="read_uncommitted")
    everything = read_backup(tmp_path, "txn-all")
    assert everything == consume_all(source_cluster, unique_name, isolation_level="read_uncommitted")
    assert [r.offset for r in everything] == [0, 1, 2, 4, 5, 7, 8, 9, 11, 12, 13]


def test_open_transaction_is_not_waited_for(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Records of a transaction still open are above the last stable offset: the run stops before them."""
    create_topic(source_cluster, unique_name)
    producer = transactional_producer(source_cluster, unique_name)
    send_transaction(producer, unique_name, [b"done"], commit=True)
    wait_until_stable(source_cluster, unique_name)
    producer.begin_transaction()
    producer.produce(unique_name, key=b"k", value=b"pending", partition=0)
    producer.flush(30)
    try:
        take_backup(source_cluster, tmp_path, "open", [unique_name])
        entry = BackupCatalog(open_storage(str(tmp_path))).load("open").latest.partitions[0]
        assert entry.end_offset == 2  # "done" at 0, its marker at 1; "pending" at 2 is not stable
        assert [r.value for r in read_backup(tmp_path, "open")] == [b"done"]
    finally:
        # Delivered first: the aborted records are in the log (holes and markers), and an
        # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
        producer.flush(30)
        producer.abort_transaction(30)
