"""The audit of a three-phase restore: the full Spark mapping, judging the groups already moved.

With ``three_phase.build_mapping: audit`` the groups are moved by the reset stage's header search
right after the restore (exact, a few probes per partition), so consumers can start at once; the
mapping then scans every restored record and judges each committed position from its ranges,
independently of the search that chose it:

- records the group had not processed that lie before its position (skipped: data loss);
- records it had processed at or after its position, against the re-reads the plan announced
  (a repartitioned topic's search announces none: against the exact position's);
- a position below the partition's log start (records deleted under the group, so its consumer
  would fall back to ``auto.offset.reset``).

Any of these is a disagreement: the run fails with :class:`AuditDisagreementError` (exit 15)
naming each row, after the groups were committed, so the operator can roll them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbackup.core.errors import AuditDisagreementError
from kbackup.format.mapping_file import OffsetMapping
from kbackup.format.reset_plan import ResetPlan
from kbackup.offsets.ranges import index_by_target

#: Rows named in the error message at most (all of them are in the details).
SHOWN = 10


@dataclass
class AuditResult:
    """What the mapping says of every committed position of a reset plan."""

    rows_checked: int = 0
    #: Records the groups read again, recounted from the mapping for every row.
    records_reread: int = 0
    disagreements: list[str] = field(default_factory=list)

    def details(self) -> dict[str, Any]:
        return {
            "audited_positions": self.rows_checked,
            "audited_rereads": self.records_reread,
            "disagreements": self.disagreements,
        }

    def raise_for_disagreement(self) -> None:
        if not self.disagreements:
            return
        shown = "\n  ".join(self.disagreements[:SHOWN])
        more = (
            f"\n  ... and {len(self.disagreements) - SHOWN} more" if len(self.disagreements) > SHOWN else ""
        )
        raise AuditDisagreementError(
            f"the audit (the full offset mapping) disagrees with {len(self.disagreements)} committed "
            f"group position(s):\n  {shown}{more}",
            hint="the groups are committed: do not start their consumers; roll them back with "
            "'kafka-backup offset-rollback' (the reset line names the snapshot) and see docs/runbook.md",
        )


def audit_positions(plan: ResetPlan, mapping: OffsetMapping) -> AuditResult:
    """Judge each row's committed position (``new_offset``) with the mapping's ranges."""
    indexes = index_by_target(mapping.ranges)
    starts = {(item.topic, item.partition): item.start_offset for item in mapping.scanned}
    result = AuditResult()
    for group in plan.groups:
        for row in group.partitions:
            if row.new_offset is None:
                continue
            result.rows_checked += 1
            where = f"group {group.group_id} on {row.target_topic}/{row.target_partition} at {row.new_offset}"
            target = (row.target_topic, row.target_partition)
            start = starts.get(target)
            if start is None:
                result.disagreements.append(f"{where}: the mapping did not scan this partition")
                continue
            if row.new_offset < start:
                result.disagreements.append(
                    f"{where}: below the partition's log start {start} (records were deleted under the "
                    "group; its consumer would fall back to auto.offset.reset)"
                )
                continue
            committed = {
                (row.source_topic, partition): offset or 0
                for partition, offset in row.source_committed.items()
            }
            index = indexes.get(target)
            reread, skipped = (0, 0) if index is None else index.cost_at(row.new_offset, committed, committed)
            result.records_reread += reread
            if skipped:
                result.disagreements.append(
                    f"{where}: {skipped:,} restored record(s) the group had not processed lie before it"
                )
            elif row.rereads is not None and reread != row.rereads:
                result.disagreements.append(
                    f"{where}: the group reads {reread:,} record(s) again, the plan said {row.rereads:,}"
                )
            elif row.method == "merged-search" and index is not None:
                # A repartitioned partition's search cannot count its re-reads: the exact position
                # (the reference's) re-reads the fewest without a skip, so any more is a wrong one.
                least = index.position(committed, sources=list(committed))
                if reread != least.reprocessed:
                    result.disagreements.append(
                        f"{where}: the group reads {reread:,} record(s) again, {least.reprocessed:,} at "
                        f"the exact position {least.offset}"
                    )
    return result
