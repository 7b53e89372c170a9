"""The accuracy study grades this project's restores from the source ledger, never from the origin headers.

Each restored record is placed by its value (sequence number and source partition) and the ledger
(the source offset of each sequence number); the origin headers, which the header-based translation
reads, are only checked against that truth. A header that lies must show up twice: as a wrong
position judged against the ledger, and as a disagreement that fails the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.accuracy.data import SourceLedger, value_origin
from bench.accuracy.measure import (
    ReadBack,
    ReadBackBuilder,
    RestoredPartition,
    header_disagreements,
    ledger_truth,
)
from bench.accuracy.study import StudyResult, failures
from kbackup.format.origin import Origin
from kbackup.offsets.ranges import PartitionIndex, build_ranges

CLUSTER, SOURCE, TARGET = "source-cluster", "src", "dst"


def value(sequence: int, partition: int) -> bytes:
    """A study record's value, as the source's producer wrote it."""
    ledger = SourceLedger()
    for _ in range(sequence):
        ledger.value(SOURCE, partition, b"")
    return ledger.value(SOURCE, partition, b"f" * 24)


def origin(partition: int, offset: int, *, cluster: str = CLUSTER, topic: str = SOURCE) -> Origin:
    return Origin(cluster, topic, partition, offset, 1_700_000_000_000)


def read_back(rows: Sequence[tuple[int, int, int, Origin | None]]) -> ReadBack:
    """(target offset, sequence number, source partition in the value, origin headers) per record."""
    builder = ReadBackBuilder(f"{TARGET}/0")
    for target_offset, sequence, partition, headers in rows:
        builder.add(target_offset, value(sequence, partition), headers)
    return builder.build()


def header_columns(read: ReadBack) -> RestoredPartition:
    """What the study graded against before: each record placed by its origin headers."""
    return RestoredPartition(read.target_offsets, read.header_partitions, read.header_offsets)


def header_translation(read: ReadBack, committed: dict[int, int]) -> int:
    """The project's translation over these headers: the mapping's ranges built from them, then the
    position the reset stage takes from a mapping (kbackup.offsets.ranges)."""
    ranges = build_ranges(
        TARGET,
        0,
        zip(
            read.target_offsets.tolist(),
            [read.origin_names[n][1] for n in read.header_names.tolist()],
            read.header_partitions.tolist(),
            read.header_offsets.tolist(),
            strict=True,
        ),
    )
    index = PartitionIndex((TARGET, 0), ranges)
    return index.position({(SOURCE, p): c for p, c in committed.items()}).offset


def test_a_values_sequence_number_and_partition_are_read_back() -> None:
    assert value(7, 2) == b"000000000007" + b"0002" + b"f" * 24
    assert value_origin(value(7, 2)) == (7, 2)
    for foreign in (None, b"", b"hello", b"00000000000x0000"):
        with pytest.raises(ValueError, match="not a study record"):
            value_origin(foreign)


def test_the_truth_comes_from_the_ledger_even_where_the_headers_say_otherwise() -> None:
    # Source partition 0 had a transaction marker at offset 2: sequence 2 sits at offset 3.
    ledger = {(SOURCE, 0): np.array([0, 1, 3, 4], dtype=np.int64)}
    read = read_back([(10, 0, 0, origin(0, 0)), (11, 1, 0, origin(0, 1)), (12, 2, 0, origin(0, 99)),
                      (13, 3, 0, None)])  # fmt: skip
    truth = ledger_truth(read, SOURCE, ledger)
    assert truth.target_offsets.tolist() == [10, 11, 12, 13]
    assert truth.source_partitions.tolist() == [0, 0, 0, 0]
    assert truth.source_offsets.tolist() == [0, 1, 3, 4]


def test_a_repartitioned_target_partition_is_placed_by_the_partition_each_value_names() -> None:
    ledger = {(SOURCE, 0): np.arange(5, dtype=np.int64), (SOURCE, 1): np.arange(5, dtype=np.int64) + 100}
    read = read_back([(0, 0, 1, origin(1, 100)), (1, 3, 0, origin(0, 3)), (2, 4, 1, origin(1, 104))])
    truth = ledger_truth(read, SOURCE, ledger)
    assert truth.source_partitions.tolist() == [1, 0, 1]
    assert truth.source_offsets.tolist() == [100, 3, 104]
    assert truth.reference_position({0: 4, 1: 101}) == 2
    assert header_disagreements(read, truth, source_cluster=CLUSTER, source_topic=SOURCE) is None


def test_a_record_the_ledger_cannot_place_stops_the_study() -> None:
    ledger = {(SOURCE, 0): np.array([0, -1], dtype=np.int64)}
    with pytest.raises(RuntimeError, match=r"no source offset in the ledger.*target offset 1"):
        ledger_truth(read_back([(0, 0, 0, None), (1, 1, 0, None)]), SOURCE, ledger, f"{TARGET}/0")
    with pytest.raises(RuntimeError, match=r"no source offset in the ledger.*sequence 5"):
        ledger_truth(read_back([(0, 5, 0, None)]), SOURCE, ledger)
    with pytest.raises(RuntimeError, match="src/3, a partition the ledger lacks"):
        ledger_truth(read_back([(0, 0, 3, None)]), SOURCE, ledger)
    with pytest.raises(RuntimeError, match="dst/0 offset 4: not a study record"):
        ReadBackBuilder(f"{TARGET}/0").add(4, b"written by someone else", None)


def test_a_lying_origin_header_is_data_loss_against_the_ledger_and_a_disagreement() -> None:
    """Record 3's headers say source offset 1; its value says sequence 3, which the ledger puts at 3.

    The translation reads the headers and places a group committed at 3 after that record. Graded
    from the same headers (the study before), that position was exact; graded from the ledger, the
    record at target offset 3 is skipped, and the cross-check names it.
    """
    ledger = {(SOURCE, 0): np.arange(6, dtype=np.int64)}
    told = [0, 1, 2, 1, 4, 5]
    read = read_back([(t, t, 0, origin(0, offset)) for t, offset in enumerate(told)])
    committed = {0: 3}
    position = header_translation(read, committed)
    assert position == 4

    assert header_columns(read).judge(committed, position) == (0, 0)  # the lie graded as right
    truth = ledger_truth(read, SOURCE, ledger)
    assert truth.reference_position(committed) == 3
    assert truth.judge(committed, position) == (1, 0)  # one record skipped: data loss

    found = header_disagreements(read, truth, source_cluster=CLUSTER, source_topic=SOURCE, where="dst/0")
    assert found == (
        "dst/0: 1 of 6 restored record(s) disagree with the ledger; the first, at target offset 3: headers "
        "say src/0 offset 1 of cluster source-cluster, its value says src/0 sequence 3, which the ledger "
        "puts at offset 3"
    )
    result = StudyResult(source=None, rows=[], timings={}, header_mismatches=[],  # type: ignore[arg-type]
                         header_disagreements=[found])  # fmt: skip
    assert failures(result) == [f"origin headers disagree with the ledger: {found}"]


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        (None, "no complete origin headers"),
        (origin(0, 1, cluster="other"), "headers say src/0 offset 1 of cluster other"),
        (origin(0, 1, topic="elsewhere"), "headers say elsewhere/0 offset 1 of cluster source-cluster"),
        (origin(2, 1), "headers say src/2 offset 1 of cluster source-cluster"),
    ],
)
def test_headers_that_are_missing_or_name_another_cluster_topic_or_partition_disagree(
    headers: Origin | None, said: str
) -> None:
    ledger = {(SOURCE, 0): np.arange(3, dtype=np.int64)}
    read = read_back([(0, 0, 0, origin(0, 0)), (1, 1, 0, headers), (2, 2, 0, origin(0, 2))])
    found = header_disagreements(read, ledger_truth(read, SOURCE, ledger), source_cluster=CLUSTER,
                                 source_topic=SOURCE)  # fmt: skip
    assert found is not None
    assert found.startswith(": 1 of 3 restored record(s) disagree")
    assert f"target offset 1: {said}, its value says src/0 sequence 1" in found


@st.composite
def restored(draw: st.DrawFn) -> tuple[dict[tuple[str, int], np.ndarray], list[tuple[int, int, int]]]:
    """A ledger of up to three source partitions with holes, and a target partition interleaving
    some of their records: (target offset, sequence number, source partition) per record."""
    ledger: dict[tuple[str, int], np.ndarray] = {}
    for partition in range(draw(st.integers(1, 3))):
        gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=20))
        ledger[(SOURCE, partition)] = np.cumsum([0, *gaps[1:]]).astype(np.int64) + draw(st.integers(0, 5))
    rows, target = [], draw(st.integers(0, 5))
    next_sequence = dict.fromkeys(range(len(ledger)), 0)
    for _ in range(draw(st.integers(1, 40))):
        partition = draw(st.sampled_from(sorted(next_sequence)))
        rows.append((target, next_sequence[partition], partition))
        next_sequence[partition] += 1
        if next_sequence[partition] == ledger[(SOURCE, partition)].size:
            del next_sequence[partition]
            if not next_sequence:
                break
        target += draw(st.integers(1, 2))
    return ledger, rows


@settings(max_examples=200, deadline=None)
@given(restored(), st.data())
def test_true_headers_agree_and_any_one_false_header_is_caught(
    case: tuple[dict[tuple[str, int], np.ndarray], list[tuple[int, int, int]]], data: st.DataObject
) -> None:
    ledger, rows = case
    honest = [(t, s, p, origin(p, int(ledger[(SOURCE, p)][s]))) for t, s, p in rows]
    read = read_back(honest)
    truth = ledger_truth(read, SOURCE, ledger)
    assert header_disagreements(read, truth, source_cluster=CLUSTER, source_topic=SOURCE) is None
    # With honest headers the two gradings are the same columns.
    assert np.array_equal(header_columns(read).source_offsets, truth.source_offsets)
    assert np.array_equal(header_columns(read).source_partitions, truth.source_partitions)

    index = data.draw(st.integers(0, len(rows) - 1))
    target, sequence, partition = rows[index]
    true_offset = int(ledger[(SOURCE, partition)][sequence])
    lie = data.draw(st.integers(0, true_offset + 5).filter(lambda offset: offset != true_offset))
    lying = read_back(
        [*honest[:index], (target, sequence, partition, origin(partition, lie)), *honest[index + 1 :]]
    )
    assert np.array_equal(ledger_truth(lying, SOURCE, ledger).source_offsets, truth.source_offsets)
    found = header_disagreements(lying, truth, source_cluster=CLUSTER, source_topic=SOURCE)
    assert found is not None
    assert f"target offset {target}: headers say src/{partition} offset {lie} " in found
