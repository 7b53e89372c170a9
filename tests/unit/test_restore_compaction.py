"""What the target's cleaner may remove from a compacted topic, counted as records are produced."""

from __future__ import annotations

import random

import pytest

from kbackup.restore import compaction
from kbackup.restore.compaction import CompactionTally


def removable(records: list[tuple[int, bytes, bytes | None]]) -> int:
    """By brute force: records that are not the last of their key in their partition, and keys whose
    last record is a tombstone."""
    last: dict[tuple[int, bytes], int] = {}
    for index, (partition, key, _value) in enumerate(records):
        last[(partition, key)] = index
    superseded = len(records) - len(last)
    tombstones = sum(1 for index in last.values() if records[index][2] is None)
    return superseded + tombstones


@pytest.mark.parametrize("collapse_at", [7, 1 << 20])
def test_tally_matches_brute_force_across_batches_and_collapses(
    collapse_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "COLLAPSE_AT", collapse_at)
    rng = random.Random(18)
    records = [
        (rng.randrange(3), b"k%d" % rng.randrange(40), None if rng.random() < 0.15 else b"v%d" % i)
        for i in range(500)
    ]
    tally = CompactionTally("customers", "compact")
    for start in range(0, len(records), 23):
        batch = records[start : start + 23]
        tally.add([p for p, _, _ in batch], [k for _, k, _ in batch], [v for _, _, v in batch])
    facts = tally.facts(resumed=False)
    assert facts.records == 500
    assert facts.may_remove == removable(records)
    assert 0 < facts.may_remove < 500
    assert facts.why.startswith("cleanup.policy=compact on the target: ")


def test_same_key_in_two_partitions_is_two_keys_and_a_revived_key_is_kept() -> None:
    tally = CompactionTally("t", "compact,delete")
    # k1 in partitions 0 and 1; k2 deleted, then written again (kept); k3 ends deleted.
    tally.add([0, 1, 0, 0, 0], [b"k1", b"k1", b"k2", b"k2", b"k3"], [b"a", b"b", b"x", None, None])
    tally.add([0], [b"k2"], [b"y"])
    facts = tally.facts(resumed=True)
    assert (facts.records, facts.may_remove) == (6, 3)
    assert "2 record(s) have a later record with the same key" in facts.why
    assert "1 key(s) end in a tombstone" in facts.why
    assert "retention.ms" in facts.why
    assert "this run only" in facts.why
    assert facts.to_dict() == {"topic": "t", "records": 6, "may_remove": 3, "why": facts.why}
