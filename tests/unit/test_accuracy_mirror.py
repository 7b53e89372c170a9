"""The accuracy study's MirrorMaker 2 bookkeeping: offset-sync records, the writer rule, the source ledger."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.accuracy.data import SourceLedger
from bench.accuracy.mirror_maker import count_syncs, mirror_properties, parse_offset_sync, queued_syncs


def offset_sync_record(topic: str, partition: int, upstream: int, downstream: int) -> tuple[bytes, bytes]:
    """Kafka's OffsetSync key and value: STRING (int16 length, UTF-8) + INT32; INT64 + INT64, big-endian."""
    name = topic.encode()
    return struct.pack(">h", len(name)) + name + struct.pack(">i", partition), struct.pack(
        ">qq", upstream, downstream
    )


@given(
    st.text(min_size=1, max_size=40), st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**62)
)
def test_an_offset_sync_record_parses_back(
    topic: str, partition: int, upstream: int, downstream: int
) -> None:
    assert parse_offset_sync(*offset_sync_record(topic, partition, upstream, downstream)) == (
        topic,
        partition,
        upstream,
        downstream,
    )


def test_the_writer_rule_queues_the_first_record_stale_translations_and_skips() -> None:
    # 0..250 copied one for one: a sync at 0, then once a translation (sync + 1) would be 100 stale.
    pairs = [(offset, offset) for offset in range(251)]
    assert queued_syncs(pairs) == [(0, 0), (101, 101), (202, 202)]
    # An upstream skip (a marker or a compacted record) is always synced, and restarts the count.
    pairs = [(0, 0), (1, 1), (3, 2), (4, 3), (104, 103)]
    assert queued_syncs(pairs) == [(0, 0), (3, 2), (104, 103)]
    # A downstream offset going back (the target truncated) is synced too.
    assert queued_syncs([(0, 5), (1, 6), (2, 0)]) == [(0, 5), (2, 0)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=400), st.integers(1, 150))
def test_no_copied_record_is_further_than_the_lag_limit_from_a_queued_sync(
    steps: list[int], lag: int
) -> None:
    """Between two queued syncs the downstream offsets advance less than offset.lag.max + 1."""
    upstream, pairs = 0, []
    for downstream, step in enumerate(steps):
        upstream += step
        pairs.append((upstream, downstream))
    queued = queued_syncs(pairs, offset_lag_max=lag)
    assert queued[0] == pairs[0]
    synced = dict(queued)
    last = -1
    for up, down in pairs:
        if up in synced:
            last = down
        assert down - (last + 1) < lag


def test_syncs_are_counted_as_dropped_when_queued_and_never_written_and_delayed_when_written_unqueued() -> (
    None
):
    pairs = [(offset, offset) for offset in range(250)]  # queues 0, 101, 202
    counts = count_syncs(pairs, emitted=[(0, 0), (202, 202), (249, 249)])
    assert (counts.queued, counts.emitted, counts.dropped, counts.delayed) == (3, 3, 1, 1)


@dataclass
class Delivered:
    """What a producer's delivery report hands the callback."""

    topic_name: str
    partition_number: int
    payload: bytes
    at: int

    def topic(self) -> str:
        return self.topic_name

    def partition(self) -> int:
        return self.partition_number

    def value(self) -> bytes:
        return self.payload

    def offset(self) -> int:
        return self.at


def test_the_ledger_maps_each_sequence_number_to_its_delivered_offset() -> None:
    ledger = SourceLedger()
    values = [ledger.value("t", 0, b"x") for _ in range(4)] + [ledger.value("t", 1, b"y")]
    assert values[2] == b"0000000000020000x"
    # Reports arrive out of order, with offset gaps (transaction markers) in between.
    for value, offset in ((values[1], 3), (values[0], 0), (values[3], 9), (values[2], 4)):
        ledger.on_delivery(None, Delivered("t", 0, value, offset))
    ledger.on_delivery(None, Delivered("t", 1, values[4], 0))
    offsets = ledger.offsets()
    assert offsets[("t", 0)].tolist() == [0, 3, 4, 9]
    assert offsets[("t", 1)].tolist() == [0]


def test_an_undelivered_record_fails_the_ledger() -> None:
    ledger = SourceLedger()
    value = ledger.value("t", 0, b"x")
    ledger.on_delivery("_MSG_TIMED_OUT", Delivered("t", 0, value, -1))
    with pytest.raises(RuntimeError, match="not delivered"):
        ledger.offsets()
    missing = SourceLedger()
    missing.value("t", 0, b"x")
    assert np.array_equal(missing.offsets()[("t", 0)], [-1])


def test_the_flow_keeps_kafkas_defaults_for_what_decides_translation() -> None:
    properties = mirror_properties("live", "live-target", "s:1", "t:1", ["a", "b"], "acc-.*")
    assert properties["live->live-target.enabled"] == "true"
    assert properties["live-target->live.enabled"] == "false"
    assert properties["live->live-target.topics"] == "a, b"
    assert properties["sync.group.offsets.enabled"] == "true"
    assert "offset.lag.max" not in properties
    assert "tasks.max" not in properties
