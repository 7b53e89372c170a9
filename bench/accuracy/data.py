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

Every record's value starts with its sequence number in its partition (12
digits) and that partition's number (4 digits), and the delivery reports fill
a ledger: the source offset of each sequence number. Every copy is judged by
it, whatever the tool keeps of the origin (MirrorMaker 2 keeps none, this
project's restore keeps origin headers): each copied record's value says which
source record it is, even where a repartitioned restore mixes several source
partitions in one target partition.
"""

from __future__ import annotations

import random
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, open_admin
from kbackup.core.types import TopicPartitionKey

MAIN, SKEW, TXN, COMPACT = "acc-main", "acc-skew", "acc-txn", "acc-compact"
#: Digits of the sequence number each record's value starts with.
SEQUENCE_DIGITS = 12
#: Digits of the source partition's number, right after the sequence number.
PARTITION_DIGITS = 4
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
    #: Per source partition, the source offset of each sequence number (``SourceLedger.offsets``).
    ledger: dict[TopicPartitionKey, np.ndarray] = field(default_factory=dict)
    #: Offsets of the records the source's transactions aborted, per partition of acc-txn.
    aborted: dict[TopicPartitionKey, np.ndarray] = field(default_factory=dict)


def value_origin(value: bytes | None) -> tuple[int, int]:
    """What a study record's value says it is: (sequence number, source partition).

    Raises ValueError for a value the study did not write (a record no ledger can place).
    """
    end = SEQUENCE_DIGITS + PARTITION_DIGITS
    if value is None or len(value) < end or not value[:end].isdigit():
        raise ValueError(f"not a study record's value: {value[:end] if value else value!r}")
    return int(value[:SEQUENCE_DIGITS]), int(value[SEQUENCE_DIGITS:end])


class SourceLedger:
    """Numbers each produced record in its partition and records, from its delivery report, its offset."""

    def __init__(self) -> None:
        self._next: dict[TopicPartitionKey, int] = {}
        self._delivered: dict[TopicPartitionKey, tuple[array[int], array[int]]] = {}
        self.errors: list[str] = []

    def value(self, topic: str, partition: int, filler: bytes) -> bytes:
        """The next record's value in this partition: its 12-digit sequence number, the 4-digit
        partition number, then ``filler``."""
        key = (topic, partition)
        sequence = self._next.get(key, 0)
        self._next[key] = sequence + 1
        return (
            str(sequence).zfill(SEQUENCE_DIGITS).encode()
            + str(partition).zfill(PARTITION_DIGITS).encode()
            + filler
        )

    def on_delivery(self, error: object, message: object) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        key = (message.topic(), message.partition())  # type: ignore[attr-defined]
        sequences, offsets = self._delivered.setdefault(key, (array("q"), array("q")))
        sequences.append(int(message.value()[:SEQUENCE_DIGITS]))  # type: ignore[attr-defined]
        offsets.append(message.offset())  # type: ignore[attr-defined]

    def offsets(self) -> dict[TopicPartitionKey, np.ndarray]:
        """Per partition, the source offset of sequence number i at index i (-1: never delivered)."""
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} records not delivered: {self.errors[0]}")
        result = {}
        for key, count in self._next.items():
            table = np.full(count, -1, dtype=np.int64)
            sequences, offsets = self._delivered.get(key, (array("q"), array("q")))
            table[np.frombuffer(sequences, dtype=np.int64)] = np.frombuffer(offsets, dtype=np.int64)
            result[key] = table
        return result


def _producer(connection: KafkaConnection, **overrides: object) -> object:
    return KafkaClients(connection, client_id="kafka-backup-accuracy").producer(
        **{"linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000, **overrides}
    )


def _produce(
    producer: object,
    ledger: SourceLedger,
    topic: str,
    filler: bytes,
    partition: int,
    timestamp: int,
    key: bytes | None = None,
) -> None:
    value = ledger.value(topic, partition, filler)
    while True:
        try:
            producer.produce(  # type: ignore[attr-defined]
                topic,
                value=value,
                key=key,
                partition=partition,
                timestamp=timestamp,
                on_delivery=ledger.on_delivery,
            )
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


def fill_main(connection: KafkaConnection, records: int, base_ms: int, ledger: SourceLedger) -> None:
    producer = _producer(connection)
    filler = b"x" * 24
    for partition, rate in enumerate(MAIN_RATES):
        for index in range(records):
            # ``rate`` records share each millisecond: the timestamp a producer stamps at that throughput.
            _produce(producer, ledger, MAIN, filler, partition, base_ms + index // rate)
            if index % 10_000 == 0:
                producer.poll(0)  # type: ignore[attr-defined]
    if producer.flush(600) != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"{MAIN}: records not delivered")


def fill_skewed(connection: KafkaConnection, records: int, base_ms: int, ledger: SourceLedger) -> None:
    """Two producers' records interleave in bursts; the second's clock is SKEW_MS behind."""
    producer = _producer(connection)
    filler = b"s" * 24
    for index in range(records):
        behind = (index // SKEW_BURST) % 2 == 1
        _produce(producer, ledger, SKEW, filler, 0, base_ms + index // 4 - (SKEW_MS if behind else 0))
        if index % 10_000 == 0:
            producer.poll(0)  # type: ignore[attr-defined]
    if producer.flush(600) != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"{SKEW}: records not delivered")


def fill_transactional(
    connection: KafkaConnection, records: int, base_ms: int, rng: random.Random, ledger: SourceLedger
) -> None:
    producer = _producer(connection, **{"transactional.id": f"accuracy-{base_ms}", "linger.ms": 5})
    producer.init_transactions(60)  # type: ignore[attr-defined]
    filler = b"t" * 24
    written = 0
    batch = 0
    while written < records * 2:
        size = rng.randint(20, 2_000)
        producer.begin_transaction()  # type: ignore[attr-defined]
        for index in range(size):
            _produce(producer, ledger, TXN, filler, index % 2, base_ms + (written + index) // 8)
        if batch % 5 == 3:
            producer.flush(120)  # type: ignore[attr-defined]
            producer.abort_transaction(120)  # type: ignore[attr-defined]
        else:
            producer.commit_transaction(120)  # type: ignore[attr-defined]
        written += size
        batch += 1
    producer.flush(120)  # type: ignore[attr-defined]


def fill_compacted(
    connection: KafkaConnection, records: int, base_ms: int, rng: random.Random, ledger: SourceLedger
) -> None:
    producer = _producer(connection)
    # Many keys, each updated a few times: survivors of compaction spread over the whole log.
    keys = [f"key-{k}".encode() for k in range(max(10, records // 4))]
    for index in range(records):
        _produce(producer, ledger, COMPACT, b"c" * 24, 0, base_ms + index // 4, key=rng.choice(keys))
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


def wait_for_compaction(
    connection: KafkaConnection, ledger: SourceLedger, timeout: float = 120.0
) -> list[int]:
    """Roll segments until the cleaner has compacted something; the holes found."""
    producer = _producer(connection, **{"linger.ms": 0})
    admin = open_admin(connection)
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(2.0)
        _produce(producer, ledger, COMPACT, b"segment roll", 0, int(time.time() * 1000), key=b"roll")
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
    connection: KafkaConnection,
    records: int,
    *,
    groups_per_bucket: int,
    seed: int,
    before_fill: Callable[[], None] = lambda: None,
) -> SourceData:
    """Create and fill the topics, then commit every study group on the source (before the backup).

    ``before_fill`` runs once the topics exist and before the first record
    (a mirror that must see the records flow starts there).
    """
    rng = random.Random(seed)
    started = time.monotonic()
    # Recent enough for brokers' timestamp checks, old enough that no record is in the future.
    base_ms = int(time.time() * 1000) - 3 * 3_600_000
    create_topics(connection)
    before_fill()
    ledger = SourceLedger()
    fill_main(connection, records, base_ms, ledger)
    small = max(1_000, records // 5)
    fill_skewed(connection, small, base_ms, ledger)
    fill_transactional(connection, small // 2, base_ms, rng, ledger)
    fill_compacted(connection, small // 2, base_ms, rng, ledger)
    compaction_holes = wait_for_compaction(connection, ledger)
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
    offsets = ledger.offsets()
    # Aborted records: delivered (they have offsets) but invisible to read_committed readers.
    aborted = {
        key: np.intersect1d(offsets[key], np.asarray(holes[key], dtype=np.int64))
        for key in ((TXN, 0), (TXN, 1))
    }
    return SourceData(
        records_per_partition=records,
        partition_counts=counts,
        groups=groups,
        holes={key: len(value) for key, value in holes.items()},
        fill_seconds=time.monotonic() - started,
        ledger=offsets,
        aborted=aborted,
    )
