"""How many restored records the target's log cleaner may remove from a compacted topic.

A compacted topic keeps only the last record of each key in a partition, and drops a key whose
last record is a tombstone (a null value) once ``delete.retention.ms`` has passed. A restored topic
created with the source's cleaner settings is compacted on the target right away, so its record
count falls below the backup's soon after the restore: correct, but it looks like a loss to anyone
comparing counts. :class:`CompactionTally` counts, per compacted target topic, the records a run
wrote that the cleaner may remove, for the summary (docs/restore.md says how to compare).

Keys are remembered as 64-bit hashes (Python's ``hash`` of the key bytes; two of ten million keys
collide with a chance of about 3 in a million, and a collision only makes the count one lower),
with their target partition and whether their last record is a tombstone: 13 bytes per record
until the next collapse, which keeps one row per key, so memory follows the topic's distinct keys,
not the records read.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: Records remembered before they are collapsed to one row per key (more, once the keys outnumber it).
COLLAPSE_AT = 1 << 20


@dataclass(frozen=True)
class CompactionFacts:
    """One compacted target topic after a run: what the run wrote, and what the cleaner may remove."""

    topic: str
    #: Records this run wrote into the topic.
    records: int
    #: Of those, records the target's cleaner may remove (superseded, and keys ending in a tombstone).
    may_remove: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "records": self.records, "may_remove": self.may_remove, "why": self.why}


def _int_array(values: array[int], kind: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array without copying them (the buffer keeps ``values`` alive)."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


class CompactionTally:
    """The records written to one compacted target topic, key by key."""

    def __init__(self, topic: str, cleanup_policy: str) -> None:
        self.topic = topic
        self.cleanup_policy = cleanup_policy
        self.records = 0
        self._partitions: array[int] = array("i")
        self._hashes: array[int] = array("q")
        self._tombstones: array[int] = array("b")
        #: One row per (partition, key hash) collapsed so far, and whether its last record is a tombstone.
        self._keys: pa.Table | None = None

    def add(self, targets: list[int], keys: list[bytes | None], values: list[bytes | None]) -> None:
        """Records produced to the topic, in order: target partition, key and value of each."""
        self.records += len(keys)
        self._partitions.extend(targets)
        self._hashes.extend(map(hash, keys))
        self._tombstones.extend([value is None for value in values])
        if len(self._hashes) >= max(COLLAPSE_AT, self._keys.num_rows if self._keys is not None else 0):
            self._collapse()

    def _collapse(self) -> None:
        pending = pa.table(
            {
                "p": _int_array(self._partitions, pa.int32()),
                "h": _int_array(self._hashes, pa.int64()),
                "t": _int_array(self._tombstones, pa.int8()),
            }
        )
        table = pending if self._keys is None else pa.concat_tables([self._keys, pending])
        # Single-threaded, "last" is the last record of each key in input (= production) order.
        grouped = table.group_by(["p", "h"], use_threads=False).aggregate([("t", "last")])
        self._keys = pa.table({"p": grouped["p"], "h": grouped["h"], "t": grouped["t_last"]})
        self._partitions, self._hashes, self._tombstones = array("i"), array("q"), array("b")

    def facts(self, *, resumed: bool) -> CompactionFacts:
        """What the cleaner may remove of this run's records (``resumed``: earlier runs wrote some of
        the topic's records, whose keys this run did not see)."""
        self._collapse()
        assert self._keys is not None
        distinct = self._keys.num_rows
        tombstones = int(pc.sum(self._keys["t"]).as_py() or 0)
        superseded = self.records - distinct
        why = (
            f"cleanup.policy={self.cleanup_policy} on the target: {superseded:,} record(s) have a later "
            f"record with the same key in their partition, and {tombstones:,} key(s) end in a tombstone, "
            "dropped after delete.retention.ms"
        )
        if "delete" in self.cleanup_policy:
            why += "; records older than retention.ms are deleted as well"
        if resumed:
            why += "; counted over the records of this run only"
        return CompactionFacts(self.topic, self.records, superseded + tombstones, why)
