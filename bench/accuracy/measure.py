"""The truth a translation is judged against, computed from the restored records themselves.

``shared/reference/offset-translation.md``: for a group with committed
source offsets C on a target partition holding restored records R,

    position = min { t(r) : o(r) >= C[p(r)] }, or max { t(r) } + 1
    skipped  = #{ r : o(r) >= C[p(r)], t(r) < P }
    re-read  = #{ r : o(r) <  C[p(r)], t(r) >= P }

The same formulas as :func:`kbackup.offsets.translate.reference_position` and
:func:`~kbackup.offsets.translate.measure`, vectorised with numpy because the
study judges a few thousand positions over millions of records
(``tests/unit/test_accuracy_measure.py`` checks the two agree).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from kbackup.app.drill_proof import read_restored
from kbackup.core.config import KafkaConnection
from kbackup.core.types import TopicPartitionKey


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


def read_restored_columns(
    connection: KafkaConnection,
    partitions: Iterable[TopicPartitionKey],
    source_cluster: str,
    timeout: float = 1800.0,
) -> dict[TopicPartitionKey, RestoredPartition]:
    """Every restored record (origin cluster = ``source_cluster``) of the partitions, read_committed."""
    restored = read_restored(connection, partitions, source_cluster, timeout=timeout)
    columns = {}
    for key in list(restored):
        records = restored.pop(key)  # one partition's objects at a time: memory stays near one copy
        columns[key] = RestoredPartition(
            np.fromiter((r.target_offset for r in records), dtype=np.int64, count=len(records)),
            np.fromiter((r.source_partition for r in records), dtype=np.int64, count=len(records)),
            np.fromiter((r.source_offset for r in records), dtype=np.int64, count=len(records)),
        )
    return columns
