"""Source logs with holes, written on a real cluster with every offset known: a compacted topic the
cleaner has cleaned (removed records leave holes), and transactions committed and aborted (each
leaves a control record, a marker, in every partition it wrote to; aborted records are holes to a
read_committed reader)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, consume_all, produce

#: A compacted topic the sandbox's cleaner (log.cleaner.backoff.ms 500) cleans within seconds.
COMPACT_FAST = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    # Tombstones stay readable for a minute after the cleaner ran, so a backup sees them.
    "delete.retention.ms": "60000",
    "min.compaction.lag.ms": "0",
}

#: The configs of COMPACT_FAST that make a cleaner act at once: left out of a restored topic
#: (restore.exclude_topic_configs) so the target's cleaner leaves the records a test compares.
FAST_CLEANING_CONFIGS = [
    "segment.ms",
    "min.cleanable.dirty.ratio",
    "delete.retention.ms",
    "min.compaction.lag.ms",
]


def compact_until(
    cluster: LocalKafkaCluster,
    topic: str,
    removed: dict[int, set[int]],
    timeout: float = 90,
) -> dict[int, list[Record]]:
    """Roll the partitions' segments (a record now and then: the active segment is never cleaned)
    until the cleaner removed every offset of ``removed[partition]``; the partitions' records then."""
    partitions = sorted(removed)
    deadline = time.monotonic() + timeout
    while True:
        records = consume_all(cluster, topic, partitions)
        held = {p: [r for r in records if r.partition == p] for p in partitions}
        if all(not removed[p] & {r.consumed_offset for r in held[p]} for p in partitions):
            return held
        assert time.monotonic() < deadline, f"the log cleaner did not compact {topic} within {timeout}s"
        time.sleep(0.5)
        produce(cluster, topic, [Record(key=b"roll", value=b"x", partition=p) for p in partitions])


@dataclass(frozen=True)
class Transaction:
    """One transaction's offsets in each partition it wrote to: its records, then its marker."""

    records: dict[int, list[int]]
    committed: bool

    def marker(self, partition: int) -> int:
        """The marker's offset: right after the transaction's last record in the partition (the
        producer's next transaction waits until the coordinator wrote every marker)."""
        return self.records[partition][-1] + 1


class TransactionWriter:
    """A transactional producer that knows the offset and timestamp of every record it wrote."""

    def __init__(self, cluster: LocalKafkaCluster, transactional_id: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id}
        )
        self.producer.init_transactions(30)

    def send(
        self, topic: str, records: Sequence[tuple[int, bytes, bytes]], *, commit: bool, timestamp: int
    ) -> Transaction:
        """One transaction of ``(partition, key, value)`` records, all stamped ``timestamp``."""
        offsets: dict[int, list[int]] = {}
        errors: list[str] = []

        def delivered(err: Any, message: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets.setdefault(message.partition(), []).append(message.offset())

        self.producer.begin_transaction()
        for partition, key, value in records:
            self.producer.produce(
                topic, key=key, value=value, partition=partition, timestamp=timestamp, on_delivery=delivered
            )
        # Delivered first, committed or aborted: the records are in the log either way, and an abort
        # sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
        assert self.producer.flush(30) == 0
        assert not errors, errors
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)
        return Transaction({p: sorted(found) for p, found in offsets.items()}, commit)
