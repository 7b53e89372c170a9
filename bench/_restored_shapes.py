"""Restored partitions of three shapes for the reset benchmark's search: hole-free, compacted and
transactional.

Every record is what a restore writes: a 100-byte value and the five origin
headers, one source partition in origin order. The shapes differ in their holes:

- **hole-free**: origin offsets and target offsets both without gaps
  (``bench.bench_mapping.fill``), the search's best case;
- **compacted**: a restore of a compacted source, into a compacted target.
  Origin offsets skip what the source's cleaner had removed (gaps of 0, 1 or
  5 offsets, as ``bench/search_shapes.py``'s random holes), and one record in
  five was superseded by a later record of the same key that the backup also
  held, so the target's own cleaner removes it once it runs: holes in the target
  offsets too. The fill waits until the cleaner has cleaned up to the active
  segment (its ``cleaner-offset-checkpoint``) or gives up after a timeout;
- **transactional**: written in transactions of 20-2,000 records (as
  ``bench/accuracy/data.py`` writes its transactional topic, much smaller than
  the exactly-once restore's own of up to 200,000 records or 2 s, so that
  probes meet holes often), one in five aborted and its records written again
  in the next one (a restore run killed and run again): commit markers and
  aborted records between the committed records.

The pure parts (``compacted_records``, ``transaction_sizes``) are unit-tested.
"""

from __future__ import annotations

import random
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from bench._perf import create_topic
from bench.bench_mapping import SOURCE_CLUSTER, VALUE, fill
from kbackup.sandbox.kafka import LocalKafkaCluster

#: Origin offset of the first record of every shape (bench_mapping's filler starts there too).
FIRST_ORIGIN_OFFSET = 1_000_000
SOURCE_TOPIC = b"orders"
#: Gaps in the origin offsets of the compacted shape (records the source's cleaner had removed).
SOURCE_GAPS = (0, 0, 0, 1, 5)
#: Share of the compacted shape's records superseded by a later record of the same key.
SUPERSEDED = 0.2
#: How far ahead (records) the superseding record of the same key is, at most.
SUPERSEDED_WITHIN = 200
#: One transaction in this many is aborted (and its records written again in the next one).
ABORT_EVERY = 5


@dataclass
class ShapeFill:
    """What a filler made."""

    shape: str
    #: Restored records written (and committed; aborted ones not counted).
    records: int
    first_origin: int
    last_origin: int
    seconds: float
    #: What went wrong making the shape (empty when it was made as described).
    note: str = ""


def compacted_records(records: int, rng: random.Random) -> Iterator[tuple[int, int]]:
    """(origin offset, key number) of each record of the compacted shape, in target order.

    Origin offsets start at FIRST_ORIGIN_OFFSET and skip SOURCE_GAPS. A record is superseded (its
    key is a later record's, at most SUPERSEDED_WITHIN ahead) with probability SUPERSEDED; keys are
    given from the end so that chains of superseded records share the last one's key.
    """
    keys = array("q", range(records))
    for index in range(records - 1, -1, -1):
        if rng.random() < SUPERSEDED and index + 1 < records:
            keys[index] = keys[min(records - 1, index + rng.randint(1, SUPERSEDED_WITHIN))]
    origin = FIRST_ORIGIN_OFFSET
    for index in range(records):
        yield origin, keys[index]
        origin += 1 + rng.choice(SOURCE_GAPS)


def transaction_sizes(records: int, rng: random.Random) -> Iterator[tuple[int, bool]]:
    """(records, aborted) of each transaction of the transactional shape, until ``records`` are
    committed; an aborted transaction's records come again in the next one."""
    committed = 0
    number = 0
    while committed < records:
        size = min(rng.randint(20, 2_000), records - committed)
        aborted = number % ABORT_EVERY == ABORT_EVERY - 2
        yield size, aborted
        if not aborted:
            committed += size
        number += 1


def _producer(bootstrap: str, **overrides: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
            **overrides,
        }
    )


def _produce(producer: Producer, topic: str, origin: int, key: bytes | None = None) -> None:
    headers: list[tuple[str, str | bytes | None]] = [
        ("x-kafka-backup-cluster", SOURCE_CLUSTER.encode()),
        ("x-kafka-backup-topic", SOURCE_TOPIC),
        ("x-kafka-backup-partition", b"0"),
        ("x-kafka-backup-offset", str(origin).encode()),
        ("x-kafka-backup-timestamp", b"1700000000000"),
    ]
    while True:
        try:
            producer.produce(topic, VALUE, key=key, partition=0, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def fill_hole_free(cluster: LocalKafkaCluster, topic: str, records: int) -> ShapeFill:
    """The hole-free shape: ``bench_mapping.fill`` into one partition."""
    started = time.monotonic()
    fill(cluster, topic, records, 1)
    last = FIRST_ORIGIN_OFFSET + records - 1
    return ShapeFill("hole-free", records, FIRST_ORIGIN_OFFSET, last, time.monotonic() - started)


def fill_compacted(
    cluster: LocalKafkaCluster, topic: str, records: int, *, seed: int = 5, wait_secs: float = 900.0
) -> ShapeFill:
    """The compacted shape (see the module's doc); waits for the target's cleaner."""
    bootstrap = cluster.bootstrap_servers
    started = time.monotonic()
    # Segments of about a twentieth of the data (at least 1 MiB): the cleaner leaves the last alone.
    segment = max(2**20, records * 220 // 20)
    create_topic(
        bootstrap,
        topic,
        1,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment),
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "86400000",
        },
    )
    producer = _producer(bootstrap)
    last_origin = FIRST_ORIGIN_OFFSET
    for index, (origin, key) in enumerate(compacted_records(records, random.Random(seed))):
        _produce(producer, topic, origin, key=b"key-%d" % key)
        last_origin = origin
        if index % 20_000 == 0:
            producer.poll(0)
    if producer.flush(600) != 0:
        raise RuntimeError(f"{topic}: records not delivered")
    note = wait_until_cleaned(cluster.data_dir, topic, wait_secs)
    return ShapeFill("compacted", records, FIRST_ORIGIN_OFFSET, last_origin, time.monotonic() - started, note)


def cleaned_to(data_dir: Path, topic: str, partition: int = 0) -> int:
    """The offset up to which the broker's cleaner has cleaned the partition (its
    ``cleaner-offset-checkpoint``); 0 before its first pass."""
    checkpoint = data_dir / "cleaner-offset-checkpoint"
    if not checkpoint.exists():
        return 0
    for line in checkpoint.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and int(parts[1]) == partition:
            return int(parts[2])
    return 0


def active_segment_base(data_dir: Path, topic: str, partition: int = 0) -> int:
    """The base offset of the partition's last (active) segment, from its files' names."""
    return max(int(path.stem) for path in (data_dir / f"{topic}-{partition}").glob("*.log"))


def wait_until_cleaned(data_dir: Path, topic: str, wait_secs: float) -> str:
    """Wait until the cleaner has cleaned everything below the active segment; a note if it has not."""
    deadline = time.monotonic() + wait_secs
    target = active_segment_base(data_dir, topic)
    while True:
        done = cleaned_to(data_dir, topic)
        if done >= target:
            return ""
        if time.monotonic() > deadline:
            return (
                f"the target's cleaner had cleaned up to offset {done:,} of {target:,} after "
                f"{wait_secs:.0f} s of waiting: the rest of the partition keeps its superseded records"
            )
        time.sleep(1.0)


def fill_transactional(cluster: LocalKafkaCluster, topic: str, records: int, *, seed: int = 7) -> ShapeFill:
    """The transactional shape (see the module's doc)."""
    bootstrap = cluster.bootstrap_servers
    started = time.monotonic()
    create_topic(bootstrap, topic)
    producer = _producer(bootstrap, **{"transactional.id": f"bench-reset-{topic}-{time.time_ns()}"})
    producer.init_transactions(60)
    origin = FIRST_ORIGIN_OFFSET
    for size, aborted in transaction_sizes(records, random.Random(seed)):
        producer.begin_transaction()
        for index in range(size):
            _produce(producer, topic, origin + index)
        if aborted:
            producer.flush(120)  # the aborted records land in the log, as a killed run's would
            producer.abort_transaction(120)
        else:
            producer.commit_transaction(120)
            origin += size
    return ShapeFill("transactional", records, FIRST_ORIGIN_OFFSET, origin - 1, time.monotonic() - started)
