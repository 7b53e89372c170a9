"""Running restores from tests, and checking a restored target against its source record by record."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kbackup.core.config import StorageSettings
from kbackup.format.origin import ORIGIN_HEADER_PREFIX, ORIGIN_HEADERS, parse_origin
from kbackup.restore import service
from kbackup.restore.settings import DEFAULT_PROGRESS_TOPIC, RestoreSettings
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.target import TRANSACTION_STATE_TOPIC
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, admin, consume_all, end_offsets, target_topics

REPO = Path(__file__).resolve().parents[2]
CONFLUENT_CREATE_TIME = 1


def restore(
    target: LocalKafkaCluster,
    storage: StorageSettings | str | Path,
    backup_id: str,
    **settings: Any,
) -> RestoreSummary:
    """Plan and run a restore in this process."""
    job = service.prepare(
        backup_id=backup_id,
        storage=storage if isinstance(storage, StorageSettings) else StorageSettings(url=str(storage)),
        target=target.connection(),
        settings=RestoreSettings.model_validate(settings),
    )
    return service.run(job)


def restore_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kbackup", *args]


def run_restore_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``kafka-backup restore ARGS`` as a subprocess, as a user runs it."""
    env = {**os.environ, "KBACKUP_NO_PROGRESS": "1"}
    return subprocess.run(
        restore_command("restore", *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )


def transactional_ids(cluster: LocalKafkaCluster) -> set[str] | None:
    """Every transactional id the cluster's transaction coordinators recorded, read from
    ``__transaction_state`` (None: the topic does not exist, no transactional producer ever started)."""
    topics = admin(cluster).list_topics(timeout=10).topics
    if TRANSACTION_STATE_TOPIC not in topics:
        return None
    partitions = sorted(topics[TRANSACTION_STATE_TOPIC].partitions)
    ids: set[str] = set()
    for record in consume_all(
        cluster, TRANSACTION_STATE_TOPIC, partitions, isolation_level="read_uncommitted"
    ):
        key = record.key or b""
        # Kafka's TransactionLogKey: an int16 version, then the transactional id as an int16-length string.
        length = int.from_bytes(key[2:4], "big")
        ids.add(key[4 : 4 + length].decode())
    return ids


def own_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    return [h for h in headers if not h[0].startswith(ORIGIN_HEADER_PREFIX)]


def assert_restored_exactly(
    source: Sequence[Record],
    restored: Sequence[Record],
    *,
    source_cluster: str,
    target_partition_of: Callable[[Record], int] | None = None,
    origin_headers: bool = True,
) -> None:
    """Every source record is on the target once, as it was, with the right origin headers, in order.

    ``target_partition_of`` says where each source record must be (default: its own partition number).
    """
    assert len(restored) == len(source), f"{len(restored)} restored records, {len(source)} in the source"
    if not origin_headers:
        for record in restored:
            assert not any(name.startswith(ORIGIN_HEADER_PREFIX) for name, _ in record.headers)
        return
    by_origin: dict[tuple[str, int, int], Record] = {}
    for record in restored:
        origin = parse_origin(record.headers)
        assert origin is not None, f"restored record without origin headers: {record}"
        key = (origin.topic, origin.partition, origin.offset)
        assert key not in by_origin, f"duplicate of source record {key} on the target"
        by_origin[key] = record
        # The five origin headers come last, in order, once.
        names = [name for name, _ in record.headers]
        assert tuple(names[-5:]) == ORIGIN_HEADERS, names
        assert sum(1 for name in names if name.startswith(ORIGIN_HEADER_PREFIX)) == 5
        assert origin.cluster == source_cluster
    for record in source:
        assert record.topic is not None
        assert record.partition is not None
        assert record.offset is not None
        key = (record.topic, record.partition, record.offset)
        assert key in by_origin, f"source record {key} is missing on the target"
        copy = by_origin[key]
        assert copy.key == record.key, key
        assert copy.value == record.value, key
        assert own_headers(copy.headers) == own_headers(record.headers), key
        assert copy.timestamp == record.timestamp, key
        assert copy.timestamp_type == CONFLUENT_CREATE_TIME, key
        origin = parse_origin(copy.headers)
        assert origin is not None
        assert origin.timestamp == record.timestamp
        expected_partition = target_partition_of(record) if target_partition_of else record.partition
        assert copy.partition == expected_partition, (key, copy.partition, expected_partition)
    assert_source_order_kept(restored)


def assert_source_order_kept(restored: Sequence[Record]) -> None:
    """In each target partition, the records of each source partition are in source offset order."""
    last: dict[tuple[int | None, str, int], int] = defaultdict(lambda: -1)
    for record in sorted(restored, key=lambda r: (r.partition or 0, r.offset or 0)):
        origin = parse_origin(record.headers)
        assert origin is not None
        slot = (record.partition, origin.topic, origin.partition)
        assert origin.offset > last[slot], (
            f"source order broken in target partition {record.partition}: {origin}"
        )
        last[slot] = origin.offset


def progress_end(cluster: LocalKafkaCluster) -> int:
    if DEFAULT_PROGRESS_TOPIC not in target_topics(cluster):
        return 0
    return end_offsets(cluster, DEFAULT_PROGRESS_TOPIC, [0])[0]
