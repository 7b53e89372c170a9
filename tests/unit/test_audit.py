"""The audit's judgement of committed positions from a mapping's ranges (kbackup.app.audit)."""

from __future__ import annotations

import pytest

from kbackup.app.audit import audit_positions
from kbackup.core.errors import AuditDisagreementError
from kbackup.format.mapping_file import OffsetMapping, ScannedPartition
from kbackup.format.reset_plan import (
    GroupReset,
    PartitionOffsets,
    PartitionReset,
    ResetPlan,
    SourceOffsetsInfo,
    TargetInfo,
)
from kbackup.offsets.ranges import OffsetRange


def row(committed: int | None, new_offset: int | None, rereads: int | None = 0) -> PartitionReset:
    return PartitionReset(
        target_topic="orders",
        target_partition=0,
        source_topic="orders",
        source_committed={0: committed},
        target_committed=None,
        new_offset=new_offset,
        method="binary-search",
        rereads=rereads,
    )


def plan(*rows: PartitionReset) -> ResetPlan:
    return ResetPlan(
        created_at="2026-11-24T03:00:00Z",
        tool_version="0.1.0",
        strategy="header-based",
        source=SourceOffsetsInfo(kind="backup", taken_at="2026-11-24T02:00:00Z", source_cluster="prod"),
        target=TargetInfo(cluster_id="target-id", bootstrap_servers=["127.0.0.1:9093"]),
        target_partitions=[PartitionOffsets(topic="orders", partition=0, log_start=0, log_end=120)],
        groups=[GroupReset(group_id=f"g{index}", partitions=[item]) for index, item in enumerate(rows)],
    )


def mapping(start: int = 0, duplicates: bool = False) -> OffsetMapping:
    """Source offsets 0..99 at target 0..99, then a commit marker at 100; optionally copies of
    source 40..49 at target 101..110 (a second producer replaying records)."""
    ranges = [OffsetRange("orders", 0, "orders", 0, 0, 99, 0, 99)]
    if duplicates:
        ranges.append(OffsetRange("orders", 0, "orders", 0, 40, 49, 101, 110))
    return OffsetMapping("prod", ranges, [ScannedPartition("orders", 0, start, 111 if duplicates else 101)])


def test_exact_positions_agree_and_the_rereads_are_recounted() -> None:
    # At the record holding source 60, at the end (past the marker: equivalent), never committed.
    audited = audit_positions(plan(row(60, 60), row(100, 101), row(None, 0), row(5, None)), mapping())
    assert audited.disagreements == []
    assert (audited.rows_checked, audited.records_reread) == (3, 0)
    audited.raise_for_disagreement()


def test_a_skip_a_reread_the_plan_did_not_announce_and_a_deleted_start_disagree() -> None:
    audited = audit_positions(plan(row(60, 61), row(60, 59)), mapping())
    assert audited.disagreements == [
        "group g0 on orders/0 at 61: 1 restored record(s) the group had not processed lie before it",
        "group g1 on orders/0 at 59: the group reads 1 record(s) again, the plan said 0",
    ]
    replayed = audit_positions(plan(row(60, 60)), mapping(duplicates=True))
    assert replayed.disagreements == [
        "group g0 on orders/0 at 60: the group reads 10 record(s) again, the plan said 0"
    ]
    # A plan that announced those re-reads agrees (a repartitioned restore's interleaved records).
    assert audit_positions(plan(row(60, 60, rereads=10)), mapping(duplicates=True)).disagreements == []
    deleted = audit_positions(plan(row(0, 0)), mapping(start=10))
    assert deleted.disagreements[0].startswith(
        "group g0 on orders/0 at 0: below the partition's log start 10"
    )
    with pytest.raises(
        AuditDisagreementError, match=r"disagrees with 1 committed group position\(s\)"
    ) as caught:
        deleted.raise_for_disagreement()
    assert caught.value.exit_code == 15


def interleaved_mapping() -> OffsetMapping:
    """A repartitioned target partition: source partitions 0 and 1 alternate, source 0's offsets
    0..4 at target 0, 2, 4, 6, 8 and source 1's offsets 0..4 at 1, 3, 5, 7, 9."""
    ranges = [
        OffsetRange("orders", p, "orders", 0, o, o, 2 * o + p, 2 * o + p) for p in (0, 1) for o in range(5)
    ]
    return OffsetMapping("prod", ranges, [ScannedPartition("orders", 0, 0, 10)])


def merged(committed: dict[int, int | None], new_offset: int) -> PartitionReset:
    return PartitionReset(
        target_topic="orders",
        target_partition=0,
        source_topic="orders",
        source_committed=committed,
        target_committed=None,
        new_offset=new_offset,
        method="merged-search",
        rereads=None,
    )


def test_a_repartitioned_search_is_judged_against_the_exact_position() -> None:
    # Committed 0@3 and 1@1: the first unprocessed record is source 1@1 at target 3; of source 0's
    # processed records (targets 0, 2, 4), the one at 4 is after it and read again.
    exact = audit_positions(plan(merged({0: 3, 1: 1}, 3)), interleaved_mapping())
    assert exact.disagreements == []
    assert exact.records_reread == 1  # source 0@2 at target 4
    # One step earlier skips nothing but re-reads source 0@1 (target 2) too: not the exact position.
    early = audit_positions(plan(merged({0: 3, 1: 1}, 2)), interleaved_mapping())
    assert early.disagreements == [
        "group g0 on orders/0 at 2: the group reads 2 record(s) again, 1 at the exact position 3"
    ]
    late = audit_positions(plan(merged({0: 3, 1: 1}, 4)), interleaved_mapping())
    assert late.disagreements == [
        "group g0 on orders/0 at 4: 1 restored record(s) the group had not processed lie before it"
    ]


def test_a_rewind_says_its_re_reads_are_offsets_and_a_translation_records() -> None:
    """A rewind counts offsets (markers, aborted and cleaned records have them too), so its summary
    must not call them records; a translated plan's re-reads are records."""
    translated = plan(row(60, 60, rereads=7))
    assert translated.rereads_words() == "7 record(s) to re-read"
    rewind = translated.model_copy(update={"strategy": "rewind"})
    assert rewind.rereads_words() == "7 offset(s) to re-read (markers and removed records included)"
