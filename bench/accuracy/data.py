"""The accuracy study's source data: topics shaped like the seeds' situations, and groups committed on them.

Everything is written with explicit record timestamps and a seeded random
generator, so a run is reproducible up to broker batching:

- ``acc-main``: 3 partitions of N records; partition 0 gets 2 records per
  millisecond, partition 1 gets 4, partition 2 gets 100 (the records-per-ms
  scenarios). Groups at lags 0 ... 100k-1M behind the head commit on all three.
- ``acc-skew``: one partition written by two interleaved producers whose
  clocks differ by 1.5 s, so timestamps jump backwards every 50 records.
- ``acc-txn``: 2 partitions written in transactions (one in five aborted);
  groups commit on holes: commit markers and aborted records.
- ``acc-compact``: one compacted partition after the log cleaner ran;
  groups commit inside compaction holes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, open_admin
from kbackup.core.types import TopicPartitionKey

MAIN, SKEW, TXN, COMPACT = "acc-main", "acc-skew", "acc-txn", "acc-compact"
#: Records per millisecond of each partition of ``acc-main``.
MAIN_RATES = (2, 4, 100)
#: Lag buckets (inclusive bounds), as in seed 002 and the issue.
LAG_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("0", 0, 0),
    ("1-99", 1, 99),
    ("100-999", 100, 999),
    ("1k-10k", 1_000, 9_999),
    ("10k-100k", 10_000, 99_999),
    ("100k-1M", 100_000, 999_999),
)
SKEW_BURST = 50
SKEW_MS = 1_500


@dataclass
class StudyGroup:
    """A consumer group of the study: what scenario it belongs to and what it committed on the source."""

    group_id: str
    scenario: str
    committed: dict[TopicPartitionKey, int]
    #: For lag groups: the lag behind the head on each partition.
    lags: dict[TopicPartitionKey, int] = field(default_factory=dict)


@dataclass
class SourceData:
    records_per_partition: int
    partition_counts: dict[str, int]
    groups: list[StudyGroup]
    #: Holes (offsets a read_committed reader does not see) found per partition of the hole topics.
    holes: dict[TopicPartitionKey, int]
    fill_seconds: float


def _producer(connection: KafkaConnection, **overrides: object) -> object:
    return KafkaClients(connection, client_id="kafka-backup-accuracy").producer(
        **{"linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000, **overrides}
    )


def _produce(
    producer: object, topic: str, value: bytes, partition: int, timestamp: int, key: bytes | None = None
) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=timestamp)  # type: ignore[attr-defined]
            return
        except BufferError:
            producer.poll(0.05)  # type: ignore[attr-defined]


def create_topics(connection: KafkaConnection) -> None:
    admin = open_admin(connection)
    compacted = {
        "cleanup.policy": "compact",
        "segment.bytes": str(1024 * 1024),
        "segment.ms": "1000",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "86400000",
    }
    topics = [
        NewTopic(MAIN, len(MAIN_RATES), 1),
        NewTopic(SKEW, 1, 1),
        NewTopic(TXN, 2, 1),
        NewTopic(COMPACT, 1, 1, config=compacted),
    ]
    for future in admin.client.create_topics(topics).values():
        future.result(60)


def fill_main(connection: KafkaConnection, records: int, base_ms: int) -> None:
    producer = _producer(connection)
    value = b"x" * 40
    for partition, rate in enumerate(MAIN_RATES):
        for index in range(records):
            # ``rate`` records share each millisecond: the timestamp a producer stamps at that throughput.
            _produce(producer, MAIN, value, partition, base_ms + index // rate)
            if index % 10_000 == 0:
                producer.poll(0)  # type: ignore[attr-defined]
    if producer.flush(600) != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"{MAIN}: records not delivered")


def fill_skewed(connection: KafkaConnection, records: int, base_ms: int) -> None:
    """Two producers' records interleave in bursts; the second's clock is SKEW_MS behind."""
    producer = _producer(connection)
    value = b"s" * 40
    for index in range(records):
        behind = (index // SKEW_BURST) % 2 == 1
        _produce(producer, SKEW, value, 0, base_ms + index // 4 - (SKEW_MS if behind else 0))
        if index % 10_000 == 0:
            producer.poll(0)  # type: ignore[attr-defined]
    if producer.flush(600) != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"{SKEW}: records not delivered")


def fill_transactional(connection: KafkaConnection, records: int, base_ms: int, rng: random.Random) -> None:
    producer = _producer(connection, **{"transactional.id": f"accuracy-{base_ms}", "linger.ms": 5})
    producer.init_transactions(60)  # type: ignore[attr-defined]
    value = b"t" * 40
    written = 0
    batch = 0
    while written < records * 2:
        size = rng.randint(20, 2_000)
        producer.begin_transaction()  # type: ignore[attr-defined]
        for index in range(size):
            _produce(producer, TXN, value, index % 2, base_ms + (written + index) // 8)
        if batch % 5 == 3:
            producer.flush(120)  # type: ignore[attr-defined]
            producer.abort_transaction(120)  # type: ignore[attr-defined]
        else:
            producer.commit_transaction(120)  # type: ignore[attr-defined]
        written += size
        batch += 1


def fill_compacted(connection: KafkaConnection, records: int, base_ms: int, rng: random.Random) -> None:
    producer = _producer(connection)
    # Many keys, each updated a few times: survivors of compaction spread over the whole log.
    keys = [f"key-{k}".encode() for k in range(max(10, records // 4))]
    for index in range(records):
        _produce(producer, COMPACT, b"c" * 40, 0, base_ms + index // 4, key=rng.choice(keys))
        if index % 10_000 == 0:
            producer.poll(0)  # type: ignore[attr-defined]
    if producer.flush(600) != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"{COMPACT}: records not delivered")


def visible_offsets(connection: KafkaConnection, topic: str, partition: int) -> list[int]:
    """Offsets a read_committed reader sees; the others are holes (markers, aborted or compacted records).

    The end is judged by the consumer's position: read_committed fetches that
    hold only aborted records can report partition EOF early.
    """
    clients = KafkaClients(connection, client_id="kafka-backup-accuracy")
    consumer = clients.consumer(properties={"isolation.level": "read_committed"})
    end = open_admin(connection).partition_ranges([(topic, partition)])[(topic, partition)].log_end
    consumer.assign([TopicPartition(topic, partition, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(num_messages=5_000, timeout=0.2)
            for message in messages:
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"reading {topic}/{partition}: {error.str()}")
                offset = message.offset()
                if offset is not None:
                    offsets.append(offset)
            if not messages and consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                return offsets
    finally:
        consumer.close()
    raise RuntimeError(f"reading {topic}/{partition} did not finish in time")


def holes_of(visible: list[int], end: int) -> list[int]:
    seen = set(visible)
    return [offset for offset in range(end) if offset not in seen]


def wait_for_compaction(connection: KafkaConnection, timeout: float = 120.0) -> list[int]:
    """Roll segments until the cleaner has compacted something; the holes found."""
    producer = _producer(connection, **{"linger.ms": 0})
    admin = open_admin(connection)
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(2.0)
        producer.produce(COMPACT, key=b"roll", value=b"segment roll", partition=0)  # type: ignore[attr-defined]
        producer.flush(10)  # type: ignore[attr-defined]
        end = admin.partition_ranges([(COMPACT, 0)])[(COMPACT, 0)].log_end
        holes = holes_of(visible_offsets(connection, COMPACT, 0), end)
        if len(holes) > end // 4 or time.monotonic() > deadline:
            return holes


def lag_groups(ends: dict[TopicPartitionKey, int], per_bucket: int, rng: random.Random) -> list[StudyGroup]:
    groups = []
    for name, low, high in LAG_BUCKETS:
        for index in range(per_bucket):
            lags = {(MAIN, p): rng.randint(low, high) for p in range(len(MAIN_RATES))}
            committed = {key: max(0, ends[key] - lag) for key, lag in lags.items()}
            groups.append(StudyGroup(f"acc-lag-{name}-{index}", f"lag {name}", committed, lags))
    return groups


def hole_groups(
    topic: str,
    partitions: int,
    holes: dict[TopicPartitionKey, list[int]],
    count: int,
    scenario: str,
    rng: random.Random,
) -> list[StudyGroup]:
    return [
        StudyGroup(
            f"{topic}-hole-{index}",
            scenario,
            {(topic, p): rng.choice(holes[(topic, p)]) for p in range(partitions) if holes[(topic, p)]},
        )
        for index in range(count)
    ]


def fill_source(
    connection: KafkaConnection, records: int, *, groups_per_bucket: int, seed: int
) -> SourceData:
    """Create and fill the topics, then commit every study group on the source (before the backup)."""
    rng = random.Random(seed)
    started = time.monotonic()
    # Recent enough for brokers' timestamp checks, old enough that no record is in the future.
    base_ms = int(time.time() * 1000) - 3 * 3_600_000
    create_topics(connection)
    fill_main(connection, records, base_ms)
    small = max(1_000, records // 5)
    fill_skewed(connection, small, base_ms)
    fill_transactional(connection, small // 2, base_ms, rng)
    fill_compacted(connection, small // 2, base_ms, rng)
    compaction_holes = wait_for_compaction(connection)
    admin = open_admin(connection)
    counts = {MAIN: len(MAIN_RATES), SKEW: 1, TXN: 2, COMPACT: 1}
    ranges = admin.partition_ranges((t, p) for t, n in counts.items() for p in range(n))
    ends = {key: item.log_end for key, item in ranges.items()}
    holes = {(TXN, p): holes_of(visible_offsets(connection, TXN, p), ends[(TXN, p)]) for p in range(2)}
    holes[(COMPACT, 0)] = compaction_holes
    groups = lag_groups(ends, groups_per_bucket, rng)
    groups += hole_groups(
        TXN, 2, holes, 4 * groups_per_bucket, "transaction markers and aborted records", rng
    )
    groups += hole_groups(COMPACT, 1, holes, 4 * groups_per_bucket, "compaction holes", rng)
    groups += [
        StudyGroup(
            f"acc-skew-{index}", "skewed producer clocks", {(SKEW, 0): rng.randint(0, ends[(SKEW, 0)])}
        )
        for index in range(4 * groups_per_bucket)
    ]
    for group in groups:
        admin.alter_offsets(group.group_id, group.committed)
    return SourceData(
        records_per_partition=records,
        partition_counts=counts,
        groups=groups,
        holes={key: len(value) for key, value in holes.items()},
        fill_seconds=time.monotonic() - started,
    )
