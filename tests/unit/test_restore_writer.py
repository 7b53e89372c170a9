"""The restore's producer writes the first record to each partition alone (TargetWriter)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kbackup.core.errors import KafkaOperationError
from kbackup.format.restore_progress import PartitionProgress
from kbackup.restore.batches import BatchRecords
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.writer import TargetWriter

PROGRESS_TOPIC = "kafka-backup.restore-progress"


class RecordingProducer:
    """Stands in for confluent-kafka's Producer: what was handed over, and when it was flushed."""

    def __init__(self, *, fail_first_delivery: bool = False) -> None:
        self.events: list[tuple[str, str, int, bytes | None]] = []
        self.fail_first_delivery = fail_first_delivery
        self.on_delivery: Any = None

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, **kw: Any) -> None:
        self.events.append(("produce", topic, kw["partition"], value))

    def flush(self, _timeout: float) -> int:
        self.events.append(("flush", "", -1, None))
        if self.fail_first_delivery and self.on_delivery is not None:
            error = SimpleNamespace(name=lambda: "NOT_LEADER_OR_FOLLOWER", str=lambda: "not leader")
            message = SimpleNamespace(topic=lambda: "t", partition=lambda: 0)
            self.on_delivery(error, message)
            self.fail_first_delivery = False
        return 0

    def poll(self, _timeout: float) -> int:
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        self.events.append(("commit", "", -1, None))


def writer_with(producer: RecordingProducer, mode: str = "idempotent") -> TargetWriter:
    plan: Any = SimpleNamespace(
        mode=mode,
        target="target cluster",
        progress_topic=PROGRESS_TOPIC,
        restore_id="r1",
        backup_id="b1",
        source_cluster="src",
    )
    writer = TargetWriter(plan, clients=None, settings=RestoreSettings(), warnings=[])  # type: ignore[arg-type]
    writer.producer = producer  # type: ignore[assignment]
    producer.on_delivery = writer._on_delivery
    return writer


def batch(targets: list[int], first_value: int = 0) -> BatchRecords:
    n = len(targets)
    values: list[bytes | None] = [b"%d" % (first_value + i) for i in range(n)]
    return BatchRecords(
        offsets=list(range(first_value, first_value + n)),
        timestamps=[1_700_000_000_000 + i for i in range(n)],
        keys=[None] * n,
        values=values,
        headers=None,
        targets=targets,
        size=0,
    )


def assert_first_record_alone(events: list[tuple[str, str, int, bytes | None]]) -> None:
    """No partition gets a second record before a flush that came after its first one."""
    first_at: dict[tuple[str, int], int] = {}
    flushes = [i for i, event in enumerate(events) if event[0] == "flush"]
    for index, (kind, topic, partition, _value) in enumerate(events):
        if kind != "produce":
            continue
        where = (topic, partition)
        if where not in first_at:
            first_at[where] = index
            continue
        assert any(first_at[where] < f < index for f in flushes), (
            f"a second record to {where} was handed over before the first one was acknowledged: {events}"
        )


def test_each_partitions_first_record_is_acknowledged_before_the_next_one_is_sent() -> None:
    producer = RecordingProducer()
    writer = writer_with(producer)
    assert writer.produce("t", batch([0, 1, 0, 2, 1, 0])) == 6
    assert writer.produce("t", batch([0, 3, 3, 1], first_value=6)) == 4
    assert_first_record_alone(producer.events)
    # Every record once, each partition's records in their order.
    sent = [(p, v) for kind, _t, p, v in producer.events if kind == "produce"]
    assert sorted(v or b"" for _p, v in sent) == sorted(b"%d" % i for i in range(10))
    for partition in (0, 1, 2, 3):
        values = [int(v or b"-1") for p, v in sent if p == partition]
        assert values == sorted(values)
    # Partitions already written need no flush: one flush for 0, 1, 2, one for 3, none after.
    assert [e[0] for e in producer.events].count("flush") == 2
    writer.produce("t", batch([0, 1, 2, 3], first_value=10))
    assert [e[0] for e in producer.events].count("flush") == 2


def test_a_failed_first_record_stops_the_run_before_the_partition_gets_another() -> None:
    producer = RecordingProducer(fail_first_delivery=True)
    writer = writer_with(producer)
    with pytest.raises(KafkaOperationError, match="NOT_LEADER_OR_FOLLOWER"):
        writer.produce("t", batch([0, 0, 0]))
    assert [e[0] for e in producer.events] == ["produce", "flush"]


def test_the_first_progress_record_is_acknowledged_alone_too() -> None:
    producer = RecordingProducer()
    writer = writer_with(producer, mode="exactly-once")
    progress = [PartitionProgress("s", p, "t", 10, 10) for p in range(3)]
    writer.commit(progress, begin_next=False)
    writer.commit(progress, begin_next=False)
    assert_first_record_alone(producer.events)
    assert [e[0] for e in producer.events].count("flush") == 1


@pytest.mark.parametrize(
    ("settings", "connection", "expected"),
    [
        (RestoreSettings(), {}, "lz4"),
        (RestoreSettings(compression="zstd"), {}, "zstd"),
        (RestoreSettings(compression="none"), {}, "none"),
        # producer_properties go over the setting; the connection's own properties over both.
        (RestoreSettings(compression="zstd", producer_properties={"compression.type": "gzip"}), {}, "gzip"),
        (RestoreSettings(compression="zstd"), {"compression.type": "snappy"}, None),
    ],
)
def test_the_producer_compresses_as_restore_compression_says(
    settings: RestoreSettings, connection: dict[str, str], expected: str | None
) -> None:
    clients: Any = SimpleNamespace(connection=SimpleNamespace(properties=connection))
    plan: Any = SimpleNamespace(mode="idempotent")
    props = TargetWriter(plan, clients=clients, settings=settings, warnings=[])._producer_properties()
    # None: left to the connection's properties, which the client factory applies.
    assert props.get("compression.type") == expected
