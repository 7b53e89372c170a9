"""Restored topics on a real target cluster, with every kind of hole, for the mapping's tests.

Restore (stage 2) is built separately, so these write what it writes:
records carrying x-kafka-backup-* origin headers after their own headers.
Each function returns the target topics it made and their partition counts.
"""

from __future__ import annotations

import random
import time

from confluent_kafka import Producer

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.mapping_oracle import origin_headers

OTHER_CLUSTER = "some-other-cluster"


def restored(cluster: str, topic: str, partition: int, offset: int, *, to: int | None = None) -> Record:
    return Record(
        key=f"{topic}-{partition}-{offset}".encode(),
        value=b"v" * 20,
        headers=origin_headers(cluster, topic, partition, offset, 1_700_000_000_000 + offset),
        partition=to if to is not None else partition,
    )


def foreign(partition: int, note: str) -> Record:
    """A record someone else wrote to the target: no origin headers."""
    return Record(key=note.encode(), value=b"foreign", partition=partition)


def holes_and_foreign_records(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """Source-side holes (compaction, markers on the source), foreign records, duplicate headers."""
    topic = f"{name}-orders"
    create_topic(target, topic, partitions=2)
    source_offsets = [*range(10), *range(12, 21), 25]
    records: list[Record] = []
    for index, offset in enumerate(source_offsets):
        if index == 4:
            records.append(foreign(0, "no headers"))
        if index == 7:
            records.append(restored(OTHER_CLUSTER, topic, 0, offset))
        if index == 15:
            # Restore appends its headers after the record's own: an older origin header
            # of the same name earlier in the list must lose.
            record = restored(source_cluster, topic, 0, offset)
            stale = (("x-kafka-backup-cluster", OTHER_CLUSTER.encode()), ("x-kafka-backup-offset", b"zzz"))
            records.append(Record(record.key, record.value, stale + record.headers, partition=0))
            continue
        if index == 16:
            # ...and a record of ours re-stamped by another cluster's restore is not ours.
            record = restored(source_cluster, topic, 0, offset)
            records.append(
                Record(
                    record.key,
                    record.value,
                    record.headers + origin_headers(OTHER_CLUSTER, "x", 0, 9),
                    partition=0,
                )
            )
            continue
        if index == 17:
            # Origin headers in another order, then a header of someone else's: still ours.
            record = restored(source_cluster, topic, 0, offset)
            headers = (*reversed(record.headers), ("trace-id", b"abc"))
            records.append(Record(record.key, record.value, headers, partition=0))
            continue
        if index == 18:
            # A later origin header of the same name wins over an earlier one.
            record = restored(source_cluster, topic, 0, 999)
            headers = (*record.headers, ("x-kafka-backup-offset", str(offset).encode()))
            records.append(Record(record.key, record.value, headers, partition=0))
            continue
        records.append(restored(source_cluster, topic, 0, offset))
    records += [restored(source_cluster, topic, 1, 1000 + i) for i in range(50)]
    records.append(foreign(1, "after the restore"))
    produce(target, topic, records)
    return {topic: 2}


def transactions(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """Committed and aborted transactions: markers and aborted records are holes on the target."""
    topic = f"{name}-payments"
    create_topic(target, topic, partitions=1)
    producer = Producer(
        {"bootstrap.servers": target.bootstrap_servers, "transactional.id": f"{name}-tx", "linger.ms": 0}
    )
    producer.init_transactions(30)
    batches = [
        ([restored(source_cluster, topic, 0, o) for o in range(0, 5)], True),
        # Aborted: must never be mapped (their source offsets would collide with nothing real).
        ([restored(source_cluster, topic, 0, o) for o in range(100, 103)], False),
        # Source offsets continue 5.. right after the first transaction: only the marker
        # and the aborted records on the target separate them, and that must split the range.
        ([restored(source_cluster, topic, 0, o) for o in range(5, 9)], True),
        ([restored(source_cluster, topic, 0, o) for o in range(9, 11)], True),
    ]
    for records, commit in batches:
        producer.begin_transaction()
        for record in records:
            producer.produce(
                topic, key=record.key, value=record.value, headers=list(record.headers), partition=0
            )
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: the aborted records are in the log (holes and markers), and an
            # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
            producer.flush(30)
            producer.abort_transaction(30)
    return {topic: 1}


def compaction(
    target: LocalKafkaCluster, name: str, source_cluster: str, timeout: float = 90.0
) -> dict[str, int]:
    """A compacted target topic after the log cleaner removed older records of repeated keys."""
    topic = f"{name}-compacted"
    create_topic(
        target,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    keys = ["u0", "a", "u1", "a", "u2", "a", "u3", "a", "u4", "b", "b", "u5"]
    records = []
    for offset, key in enumerate(keys):
        record = restored(source_cluster, topic, 0, 500 + offset)
        records.append(Record(key.encode(), record.value, record.headers, partition=0))
    produce(target, topic, records)
    time.sleep(0.5)
    # A later record rolls the segment, so the cleaner may compact the first one.
    produce(target, topic, [restored(source_cluster, topic, 0, 500 + len(keys))])
    survivors = len(set(keys)) + 1
    deadline = time.monotonic() + timeout
    while len(consume_all(target, topic)) > survivors:
        if time.monotonic() > deadline:
            raise AssertionError(f"the log cleaner did not compact {topic} within {timeout:g}s")
        time.sleep(1)
    return {topic: 1}


def renamed(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """Source topic ``{name}-src`` restored into a target topic of another name."""
    topic = f"{name}-prod-renamed"
    create_topic(target, topic, partitions=1)
    produce(target, topic, [restored(source_cluster, f"{name}-src", 0, 40 + i) for i in range(30)])
    return {topic: 1}


def repartitioned(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """3 source partitions restored into 6, records of several source partitions interleaved."""
    topic = f"{name}-repart"
    create_topic(target, topic, partitions=6)
    rnd = random.Random(5)
    current = {p: p for p in range(3)}
    records = []
    for offset in range(60):
        for p in range(3):
            if offset == 30 and p == 1:
                continue  # a source-side hole too
            if rnd.random() < 0.3:
                current[p] = rnd.randrange(6)
            records.append(restored(source_cluster, f"{name}-events", p, offset, to=current[p]))
    produce(target, topic, records)
    return {topic: 6}


def empty_and_foreign_only(target: LocalKafkaCluster, name: str) -> dict[str, int]:
    """A topic with no records, and one that holds only records without origin headers."""
    create_topic(target, f"{name}-empty", partitions=2)
    create_topic(target, f"{name}-foreign", partitions=1)
    produce(target, f"{name}-foreign", [foreign(0, f"f{i}") for i in range(5)])
    return {f"{name}-empty": 2, f"{name}-foreign": 1}


def malformed(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """Records of the wanted cluster whose origin offset is not a number."""
    topic = f"{name}-damaged"
    create_topic(target, topic, partitions=1)
    good = [restored(source_cluster, topic, 0, o) for o in range(3)]
    bad = restored(source_cluster, topic, 0, 3)
    headers = tuple((k, b"12x" if k == "x-kafka-backup-offset" else v) for k, v in bad.headers)
    produce(target, topic, [*good, Record(bad.key, bad.value, headers, partition=0)])
    return {topic: 1}


def equal_holes(target: LocalKafkaCluster, name: str, source_cluster: str) -> dict[str, int]:
    """The shape the mapping's first pass cannot split: the same offset difference after equal holes.

    Partition 0: source offsets 5 and 6 were compacted away before the backup, and two foreign
    records took target offsets 5 and 6, so source 0-4 and 7-11 sit at target 0-4 and 7-11
    (difference 0 both times); likewise 14 and 15 for a record of another cluster and one
    without headers. Partition 1 is an ordinary hole-free restore.
    """
    topic = f"{name}-equal-holes"
    create_topic(target, topic, partitions=2)
    records = [restored(source_cluster, topic, 0, o) for o in range(5)]
    records += [foreign(0, "in place of 5"), foreign(0, "in place of 6")]
    records += [restored(source_cluster, topic, 0, o) for o in range(7, 12)]
    records += [restored(source_cluster, topic, 0, 12), restored(source_cluster, topic, 0, 13)]
    records += [restored(OTHER_CLUSTER, topic, 0, 14), foreign(0, "in place of 15")]
    records += [restored(source_cluster, topic, 0, o) for o in range(16, 20)]
    records += [restored(source_cluster, topic, 1, 300 + o, to=1) for o in range(40)]
    produce(target, topic, records)
    return {topic: 2}


def repartitioned_without_equal_holes(
    target: LocalKafkaCluster, name: str, source_cluster: str
) -> dict[str, int]:
    """3 source partitions into 6, interleaved, with source compaction holes: all first-pass work.

    Every source partition visits each target partition at most once (so an offset difference
    cannot come back on a later visit). Where two source partitions are interleaved, neither
    has source holes: each of their records' difference rises with the records of the other
    in between. Source holes only fall in stretches a target partition takes from one source
    partition alone, where the difference falls at each hole. So no difference recurs after a
    hole, and no target partition needs the exact path.
    """
    topic = f"{name}-repart-first-pass"
    create_topic(target, topic, partitions=6)
    # Phase -> source partition -> target partition; a shared target interleaves two sources.
    phases = [{0: 0, 1: 0, 2: 1}, {0: 2, 1: 3, 2: 3}, {0: 4, 1: 5, 2: 4}]
    rnd = random.Random(7)
    next_offset = {p: 0 for p in range(3)}
    records: list[Record] = []
    for routes in phases:
        shared = {to for to in routes.values() if list(routes.values()).count(to) > 1}
        queues: dict[int, list[int]] = {}
        for p, to in routes.items():
            offsets = []
            for _ in range(20):
                if to not in shared and rnd.random() < 0.2:
                    next_offset[p] += rnd.randint(1, 3)  # compacted away on the source
                offsets.append(next_offset[p])
                next_offset[p] += 1
            queues[p] = offsets
        while any(queues.values()):
            p = rnd.choice([p for p, offsets in queues.items() if offsets])
            records.append(restored(source_cluster, f"{name}-events", p, queues[p].pop(0), to=routes[p]))
    produce(target, topic, records)
    return {topic: 6}
