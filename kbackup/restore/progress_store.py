"""Reading a restore's progress back from the target (the records are ``kbackup.format.restore_progress``).

A re-run reads the progress topic with ``isolation.level=read_committed`` and keeps the latest
value per key: every source partition's committed progress of one restore id.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka import Admin, KafkaClients, PartitionReader
from kbackup.core.types import TopicPartitionKey
from kbackup.format.restore_progress import PROGRESS_PARTITION, PartitionProgress, decode_progress


@dataclass
class ProgressRead:
    """The committed progress of one restore."""

    entries: dict[TopicPartitionKey, PartitionProgress]
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
    key = (topic, PROGRESS_PARTITION)
    span = Admin(clients).partition_ranges([key], read_committed=False)[key]
    low, high = span.log_start, span.log_end
    entries: dict[TopicPartitionKey, PartitionProgress] = {}
    if high <= low:
        return ProgressRead(entries)
    with PartitionReader(clients, properties={"fetch.max.bytes": 8 * 1024 * 1024}) as reader:
        for batch in reader.batches(
            topic,
            PROGRESS_PARTITION,
            low,
            high,
            timeout_secs=timeout,
            # Waiting: read on past the last stable offset while an open transaction holds it.
            stop_at_partition_end=not wait_for_open_transactions,
            raise_on_timeout=False,
        ):
            for message in batch:
                found, value = message.key(), message.value()
                if found is None or not found.startswith(prefix) or value is None:
                    continue
                decoded = decode_progress(value)
                if decoded is not None:
                    entries[(decoded.source_topic, decoded.source_partition)] = decoded
        reached = reader.reached
    if reached >= high:
        return ProgressRead(entries)
    if not wait_for_open_transactions:
        return ProgressRead(entries, undecided=high - reached)
    raise KafkaOperationError(
        f"the restore progress in {topic} on {','.join(clients.connection.bootstrap_servers)} could "
        f"not be read to its end within {timeout:g}s: offsets {reached}..{high} are held by an "
        "open transaction (another restore running, or one killed less than its "
        "transaction.timeout.ms ago)",
        hint="wait a minute for the broker to abort a dead transaction",
        retryable=True,
    )
