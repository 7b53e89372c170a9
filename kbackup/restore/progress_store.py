"""A restore's progress, stored on the target inside the same transactions as the records.

The progress topic (``restore.progress_topic``, compacted, partition 0 is the
one used) holds one record per (restore id, source topic, source partition):

- key: ``<restore id>/<source topic>/<source partition>`` (UTF-8);
- value: UTF-8 JSON ``{"format": 1, "restore_id", "backup_id", "source_cluster",
  "source_topic", "source_partition", "target_topic", "next_offset",
  "restored_records", "complete", "updated_at"}`` where every selected record
  with a source offset below ``next_offset`` is on the target, committed, and
  none at or above it is.

A record is produced for every source partition that advanced, in the
transaction that carries that advance, so a transaction commits both or
neither. A re-run reads the topic with ``isolation.level=read_committed`` and
keeps the latest value per key. See docs/restore.md.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka import KafkaClients, translate_kafka_error
from kbackup.core.logs import get_logger

log = get_logger("restore.progress")

PROGRESS_PARTITION = 0
PROGRESS_FORMAT = 1


@dataclass
class PartitionProgress:
    """How far a restore has got with one source partition."""

    source_topic: str
    source_partition: int
    target_topic: str
    #: Every selected record below this source offset is restored; none at or above it.
    next_offset: int
    #: Records restored from this source partition, over all runs of the restore.
    restored_records: int
    #: The whole selected range of the partition is restored.
    complete: bool = False


def progress_key(restore_id: str, source_topic: str, source_partition: int) -> bytes:
    return f"{restore_id}/{source_topic}/{source_partition}".encode()


def encode_progress(
    restore_id: str, backup_id: str, source_cluster: str, progress: PartitionProgress
) -> bytes:
    value = {
        "format": PROGRESS_FORMAT,
        "restore_id": restore_id,
        "backup_id": backup_id,
        "source_cluster": source_cluster,
        "source_topic": progress.source_topic,
        "source_partition": progress.source_partition,
        "target_topic": progress.target_topic,
        "next_offset": progress.next_offset,
        "restored_records": progress.restored_records,
        "complete": progress.complete,
        "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    return json.dumps(value, separators=(",", ":")).encode()


def decode_progress(value: bytes) -> PartitionProgress | None:
    """A progress record's value, or None for one this release does not understand."""
    try:
        raw: dict[str, Any] = json.loads(value)
        if raw.get("format") != PROGRESS_FORMAT:
            return None
        return PartitionProgress(
            source_topic=str(raw["source_topic"]),
            source_partition=int(raw["source_partition"]),
            target_topic=str(raw["target_topic"]),
            next_offset=int(raw["next_offset"]),
            restored_records=int(raw["restored_records"]),
            complete=bool(raw.get("complete", False)),
        )
    except (ValueError, KeyError, TypeError):
        return None


@dataclass
class ProgressRead:
    """The committed progress of one restore."""

    entries: dict[tuple[str, int], PartitionProgress]
    #: Records of the progress partition not yet decided (an open transaction; dry runs only).
    undecided: int = 0


def read_progress(
    clients: KafkaClients,
    topic: str,
    restore_id: str,
    *,
    timeout: float,
    wait_for_open_transactions: bool = True,
) -> ProgressRead:
    """The latest committed progress record of each source partition of ``restore_id``.

    Reads with read_committed up to the end the partition had when the read
    started. Records of a transaction still open (another restore's, or a
    killed run's before its transactional.id is reused) hold the read until
    they are decided; the real run calls this after ``init_transactions``,
    which aborts this restore's own leftover transaction. With
    ``wait_for_open_transactions`` off (dry runs) it reads what is decided and
    reports how many records are not.
    """
    prefix = f"{restore_id}/".encode()
    partition = TopicPartition(topic, PROGRESS_PARTITION)
    connection = clients.connection
    uncommitted_props: dict[str, Any] = {"isolation.level": "read_uncommitted"}
    uncommitted = clients.consumer(**uncommitted_props)
    try:
        low, high = uncommitted.get_watermark_offsets(partition, timeout=connection.connect_timeout_secs)
    except Exception as exc:
        raise translate_kafka_error(exc, action=f"read the end of {topic}", connection=connection) from None
    finally:
        uncommitted.close()
    entries: dict[tuple[str, int], PartitionProgress] = {}
    if high <= low:
        return ProgressRead(entries)
    committed_props: dict[str, Any] = {
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.max.bytes": 8 * 1024 * 1024,
    }
    consumer = clients.consumer(**committed_props)
    deadline = time.monotonic() + timeout
    reached = low
    try:
        consumer.assign([TopicPartition(topic, PROGRESS_PARTITION, low)])
        while True:
            if time.monotonic() > deadline:
                if not wait_for_open_transactions:
                    return ProgressRead(entries, undecided=max(0, high - reached))
                raise KafkaOperationError(
                    f"the restore progress in {topic} on {','.join(connection.bootstrap_servers)} could "
                    f"not be read to its end within {timeout:g}s: offsets {reached}..{high} are held by an "
                    "open transaction (another restore running, or one killed less than its "
                    "transaction.timeout.ms ago)",
                    hint="wait a minute for the broker to abort a dead transaction",
                    retryable=True,
                )
            message = consumer.poll(0.2 if wait_for_open_transactions else 0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    reached = max(reached, message.offset() or 0)
                    if reached >= high:
                        break
                    if not wait_for_open_transactions:
                        deadline = min(deadline, time.monotonic() + 1.0)
                    continue
                raise translate_kafka_error(
                    KafkaException(error), action=f"read {topic}", connection=connection
                )
            reached = max(reached, (message.offset() or 0) + 1)
            key = message.key()
            value = message.value()
            if key is None or not key.startswith(prefix) or value is None:
                if reached >= high:
                    break
                continue
            decoded = decode_progress(value)
            if decoded is not None:
                entries[(decoded.source_topic, decoded.source_partition)] = decoded
            if reached >= high:
                break
    finally:
        consumer.close()
    return ProgressRead(entries)
