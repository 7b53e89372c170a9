"""The truth a translation is judged against, computed from the copied records and the source ledger.

``shared/reference/offset-translation.md``: for a group with committed
source offsets C on a target partition holding restored records R,

    position = min { t(r) : o(r) >= C[p(r)] }, or max { t(r) } + 1
    skipped  = #{ r : o(r) >= C[p(r)], t(r) < P }
    re-read  = #{ r : o(r) <  C[p(r)], t(r) >= P }

The same formulas as :func:`kbackup.offsets.translate.reference_position` and
:func:`~kbackup.offsets.translate.measure`, vectorised with numpy because the
study judges a few thousand positions over millions of records
(``tests/unit/test_accuracy_measure.py`` checks the two agree).

Where p(r) and o(r) come from decides what the study can see. This project's
translation reads the origin headers (``x-kafka-backup-*``) its restore
stamps; grading it from the same headers would call a wrong header right. So
every record of this project's restores is placed by its value instead, as
MirrorMaker 2's copies are: the value says its source partition and its
sequence number there (``bench.accuracy.data``), and the source ledger, filled
from the producer's delivery reports, says that sequence number's source
offset (:func:`ledger_truth`). The headers are read only to be checked against
that truth (:func:`header_disagreements`): a record whose origin headers name
another source record than its value does is a product bug, and fails the run.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from bench.accuracy.data import value_origin
from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, PartitionReader, open_admin
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import Origin, parse_origin


@dataclass(frozen=True)
class RestoredPartition:
    """One target partition's restored records, in target-offset order, as columns."""

    target_offsets: np.ndarray  # int64
    source_partitions: np.ndarray  # int64
    source_offsets: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.target_offsets.size)

    def processed(self, committed: Mapping[int, int]) -> np.ndarray:
        """Which records the group had processed on the source (o < C; a partition without C: none)."""
        if not len(self):
            return np.zeros(0, dtype=bool)
        thresholds = np.zeros(int(self.source_partitions.max()) + 1, dtype=np.int64)
        for partition, offset in committed.items():
            if 0 <= partition < thresholds.size:
                thresholds[partition] = offset
        result: np.ndarray = self.source_offsets < thresholds[self.source_partitions]
        return result

    def reference_position(self, committed: Mapping[int, int]) -> int | None:
        if not len(self):
            return None
        unprocessed = self.target_offsets[~self.processed(committed)]
        if unprocessed.size:
            return int(unprocessed.min())
        return int(self.target_offsets.max()) + 1

    def judge(self, committed: Mapping[int, int], position: int) -> tuple[int, int]:
        """(skipped, re-read) when the group resumes at ``position``."""
        processed = self.processed(committed)
        before = self.target_offsets < position
        skipped = int(np.count_nonzero(~processed & before))
        reread = int(np.count_nonzero(processed & ~before))
        return skipped, reread

    def pairs(self, source_partition: int) -> Iterable[tuple[int, int]]:
        """(source offset, target offset) of one source partition's records, in target order."""
        chosen = self.source_partitions == source_partition
        return zip(self.source_offsets[chosen].tolist(), self.target_offsets[chosen].tolist(), strict=True)


@dataclass(frozen=True)
class ReadBack:
    """One target partition's records as read back, in target-offset order, before any judging:
    what each record's value says it is, and what its origin headers say."""

    target_offsets: np.ndarray  # int64
    #: From the value: the record's sequence number in its source partition, and that partition.
    sequences: np.ndarray  # int64
    value_partitions: np.ndarray  # int64
    #: From the origin headers: the index of their (cluster, topic) in ``origin_names``, -1 where
    #: the record has no complete origin headers; then their partition and offset (-1 there).
    header_names: np.ndarray  # int64
    header_partitions: np.ndarray  # int64
    header_offsets: np.ndarray  # int64
    origin_names: tuple[tuple[str, str], ...]

    def __len__(self) -> int:
        return int(self.target_offsets.size)


class ReadBackBuilder:
    """Collects one target partition's records, one at a time, into a :class:`ReadBack`."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._columns = (array("q"), array("q"), array("q"), array("q"), array("q"), array("q"))
        self._names: dict[tuple[str, str], int] = {}

    def add(self, target_offset: int, value: bytes | None, origin: Origin | None) -> None:
        try:
            sequence, partition = value_origin(value)
        except ValueError as exc:
            raise RuntimeError(f"{self.where} offset {target_offset}: {exc}") from None
        if origin is None:
            name, header_partition, header_offset = -1, -1, -1
        else:
            name = self._names.setdefault((origin.cluster, origin.topic), len(self._names))
            header_partition, header_offset = origin.partition, origin.offset
        targets, sequences, partitions, names, header_partitions, header_offsets = self._columns
        targets.append(target_offset)
        sequences.append(sequence)
        partitions.append(partition)
        names.append(name)
        header_partitions.append(header_partition)
        header_offsets.append(header_offset)

    def build(self) -> ReadBack:
        targets, sequences, partitions, names, header_partitions, header_offsets = (
            np.frombuffer(column, dtype=np.int64).copy() for column in self._columns
        )
        return ReadBack(
            targets, sequences, partitions, names, header_partitions, header_offsets, tuple(self._names)
        )


def ledger_truth(
    read: ReadBack, source_topic: str, ledger: Mapping[TopicPartitionKey, np.ndarray], where: str = ""
) -> RestoredPartition:
    """Each record placed by its value alone: the source partition it names, and the source offset
    the ledger gives its sequence number there. Never reads the origin headers.

    ``source_topic`` is the topic the restore was asked to copy into this target topic. A record
    the ledger cannot place (a value of a partition it does not hold, a sequence number never
    delivered) raises: the truth would have a hole.
    """
    offsets = np.full(len(read), -1, dtype=np.int64)
    for partition in np.unique(read.value_partitions).tolist():
        table = ledger.get((source_topic, partition))
        if table is None:
            raise RuntimeError(
                f"{where}: records of {source_topic}/{partition}, a partition the ledger lacks"
            )
        chosen = read.value_partitions == partition
        sequences = read.sequences[chosen]
        known = sequences < table.size
        found = np.full(sequences.size, -1, dtype=np.int64)
        found[known] = table[sequences[known]]
        offsets[chosen] = found
    missing = offsets < 0
    if missing.any():
        first = int(np.argmax(missing))
        raise RuntimeError(
            f"{where}: {int(missing.sum())} record(s) with no source offset in the ledger, the first at "
            f"target offset {int(read.target_offsets[first])} (sequence {int(read.sequences[first])} of "
            f"{source_topic}/{int(read.value_partitions[first])})"
        )
    return RestoredPartition(read.target_offsets, read.value_partitions, offsets)


def header_disagreements(
    read: ReadBack, truth: RestoredPartition, *, source_cluster: str, source_topic: str, where: str = ""
) -> str | None:
    """The records whose origin headers name another source record than the ledger's truth, or None.

    A record agrees when its headers name ``source_cluster``, ``source_topic``, the partition its
    value names and the offset the ledger gives its sequence number; a record without complete
    origin headers disagrees. Any disagreement is a product bug (the translation reads those
    headers), so the study reports it and fails rather than grading around it.
    """
    names = {name: index for index, name in enumerate(read.origin_names)}
    expected = names.get((source_cluster, source_topic), -2)  # -2: no record's headers name them
    wrong = (
        (read.header_names != expected)
        | (read.header_partitions != truth.source_partitions)
        | (read.header_offsets != truth.source_offsets)
    )
    count = int(np.count_nonzero(wrong))
    if not count:
        return None
    first = int(np.argmax(wrong))
    name = int(read.header_names[first])
    partition, offset = int(read.header_partitions[first]), int(read.header_offsets[first])
    if name < 0:
        said = "no complete origin headers"
    else:
        cluster, topic = read.origin_names[name]
        said = f"headers say {topic}/{partition} offset {offset} of cluster {cluster}"
    value = f"{source_topic}/{int(truth.source_partitions[first])} sequence {int(read.sequences[first])}"
    return (
        f"{where}: {count:,} of {len(read):,} restored record(s) disagree with the ledger; the first, at "
        f"target offset {int(read.target_offsets[first])}: {said}, its value says {value}, which the "
        f"ledger puts at offset {int(truth.source_offsets[first])}"
    )


def read_restored_columns(
    connection: KafkaConnection,
    source_topics: Mapping[TopicPartitionKey, str],
    ledger: Mapping[TopicPartitionKey, np.ndarray],
    source_cluster: str,
    timeout: float = 1800.0,
) -> tuple[dict[TopicPartitionKey, RestoredPartition], list[str]]:
    """Every record of this project's restored partitions, judged from its value and the ledger.

    ``source_topics`` maps each target partition to the source topic the restore was asked to copy
    into it. Reads read_committed, every record of each partition (the study's restored topics hold
    nothing else). Returns the truth per partition and one line per partition whose origin headers
    disagree with the ledger (see :func:`header_disagreements`; empty when the product is right).
    """
    keys = sorted(source_topics)
    ranges = open_admin(connection).partition_ranges(keys)
    truth: dict[TopicPartitionKey, RestoredPartition] = {}
    disagreements: list[str] = []
    deadline = time.monotonic() + timeout
    with PartitionReader(KafkaClients(connection, client_id="kafka-backup-accuracy-restored")) as reader:
        for key in keys:
            where = f"{key[0]}/{key[1]}"
            builder = ReadBackBuilder(where)
            span = ranges[key]
            if span.log_end > span.log_start:
                for batch in reader.batches(
                    key[0], key[1], span.log_start, span.log_end,
                    timeout_secs=max(0.0, deadline - time.monotonic()),
                ):  # fmt: skip
                    for message in batch:
                        offset = message.offset()
                        assert offset is not None  # the reader hands over records only
                        headers = message.headers()
                        builder.add(
                            offset,
                            message.value(),
                            parse_origin(headers if isinstance(headers, list) else None),
                        )
            read = builder.build()  # one partition's columns at a time: only the truth is kept
            source_topic = source_topics[key]
            truth[key] = ledger_truth(read, source_topic, ledger, where)
            found = header_disagreements(
                read, truth[key], source_cluster=source_cluster, source_topic=source_topic, where=where
            )
            if found is not None:
                disagreements.append(found)
    return truth, disagreements
