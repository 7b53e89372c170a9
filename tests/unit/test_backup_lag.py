"""The copier's backup lag: records not yet committed, and the age of the oldest of them.

The copier runs against a consumer that hands out prepared batches of confluent-kafka's own
Message objects and answers the cached end offset, and writes real segments to a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kbackup.backup.copier import Copier
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import PartitionPlan
from kbackup.core.config import KafkaConnection
from kbackup.format.segments import SegmentLimits
from kbackup.storage import LocalStorage

NOW = 1_700_000_000.0


class FakeConsumer:
    def __init__(self) -> None:
        self.batches: list[list[Message]] = []
        #: The end offset librdkafka would have cached from its last fetch answer.
        self.high = -1001

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        pass

    def get_watermark_offsets(self, partition: TopicPartition, cached: bool = False) -> tuple[int, int]:
        assert cached, "the lag must never send a request"
        return 0, self.high


def records(first: int, count: int, age_secs: float) -> list[Message]:
    created = int((NOW - age_secs) * 1000)
    return [
        Message(topic="orders", partition=0, offset=offset, key=b"k", value=b"v", timestamp=(1, created))
        for offset in range(first, first + count)
    ]


def plan(start: int, end: int | None) -> PartitionPlan:
    return PartitionPlan(
        "orders", 0, start_offset=start, log_start_offset=0, fetch_offset=start, end_offset=end
    )


def lag(metrics: BackupMetrics) -> tuple[float, float]:
    found = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name in ("kafka_backup_lag_records", "kafka_backup_lag_seconds"):
                found[sample.name] = sample.value
    return found["kafka_backup_lag_records"], found["kafka_backup_lag_seconds"]


@pytest.fixture
def copier(tmp_path: Path) -> Any:
    consumer = FakeConsumer()
    metrics = BackupMetrics("b1", mode="follow", wall_clock=lambda: NOW)
    copier = Copier(
        consumer,  # type: ignore[arg-type]
        LocalStorage(tmp_path / "store"),
        connection=KafkaConnection(bootstrap_servers=["localhost:9"]),
        backup_id="b1",
        source_cluster="c1",
        limits=SegmentLimits(),
        scratch_dir=tmp_path,
        follow=True,
        buffer_memory_bytes=64 * 1024 * 1024,
        max_open_segments=8,
        segment_max_interval_secs=60,
        stall_timeout_secs=60,
        metrics=metrics,
    )
    yield copier
    copier.close()


def test_the_lag_counts_from_the_committed_end_and_ages_from_the_oldest_uncommitted_record(
    copier: Any,
) -> None:
    consumer, metrics = copier.consumer, copier.metrics
    copier.start_increment([plan(0, None)])
    assert lag(metrics) == (0, 0)
    # Three records, written 50 s ago, read but not committed.
    consumer.high = 3
    consumer.batches.append(records(0, 3, age_secs=50))
    assert copier.poll(0) == 3
    copier.refresh_lag()
    assert lag(metrics) == pytest.approx((3, 50))
    assert metrics.health.records_waiting is False  # all read: idle at the end of the log
    # The checkpoint fixes the increment's end at 3; two newer records already belong to the next.
    copier.start_increment([plan(0, 3)])
    consumer.high = 6
    consumer.batches.append(records(3, 2, age_secs=10))
    copier.poll(0)
    copier.refresh_lag()
    # Nothing is committed yet: six records behind (one not even read), the oldest 50 s old.
    assert lag(metrics) == pytest.approx((6, 50))
    assert metrics.health.records_waiting is True
    # The increment up to 3 is committed: what waits is the next one's, 10 s old.
    entries, _segments = copier.take_increment()
    copier.after_commit(entries)
    assert lag(metrics) == pytest.approx((3, 10))
    # Everything read and committed: no lag.
    consumer.batches.append(records(5, 1, age_secs=1))
    copier.poll(0)
    copier.start_increment([plan(3, 6)])
    entries, _segments = copier.take_increment()
    copier.after_commit(entries)
    assert lag(metrics) == (0, 0)
