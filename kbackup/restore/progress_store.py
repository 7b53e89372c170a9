"""Reading a restore's progress back from the target (the records are ``kbackup.format.restore_progress``).

A re-run reads the progress topic with ``isolation.level=read_committed`` and keeps the latest
value per key: every source partition's committed progress of one restore id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.clients import KafkaClients, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.format.restore_progress import PROGRESS_PARTITION, PartitionProgress, decode_progress

log = get_logger("restore.progress")


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
