"""The reset plan: what ``offset-reset plan`` writes for review and ``execute`` applies.

A plan is a versioned JSON document with no secrets in it. It records what it
was computed from (source offsets and when they were taken, the target
cluster id, each group's committed offsets on the target and each target
partition's offsets at planning time) so that execute can refuse a plan for
another cluster or one the target has moved past.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kbackup.core.config import KAFKA_INT32_MAX, KAFKA_INT64_MAX
from kbackup.format.documents import parse_plan_document, read_plan_bytes

#: Offsets and partitions a plan may name: what Kafka can hold. A hand-edited -1 would otherwise
#: reach the broker, which reads negative commits as "no offset".
Offset = Annotated[int, Field(ge=0, le=KAFKA_INT64_MAX)]
Partition = Annotated[int, Field(ge=0, le=KAFKA_INT32_MAX)]

PLAN_FORMAT = "kafka-backup-reset-plan"
PLAN_VERSION = 1

Method = Literal[
    "binary-search", "merged-search", "mapping", "timestamp", "earliest", "latest", "offset", "rewind", "none"
]


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OriginOffset(PlanModel):
    topic: str
    partition: Partition
    offset: Offset


class PartitionReset(PlanModel):
    """One group's new position on one target partition."""

    target_topic: str
    target_partition: Partition
    source_topic: str
    #: The group's committed source offset per source partition feeding this target
    #: partition (one entry with the default mapping); None where it never committed.
    source_committed: dict[Partition, Offset | None]
    #: The group's committed offset on the target when the plan was made.
    target_committed: Offset | None
    #: The offset to commit; None when there is nothing to commit (no restored record and no commit).
    new_offset: Offset | None
    method: Method
    #: The origin of the record at ``new_offset`` (None when the position is past the last restored record).
    expected_origin: OriginOffset | None = None
    #: Records the group will read again (already processed on the source); 0 when exact, None if unknown.
    #: For a rewind, offsets: an upper bound, since commit markers, aborted records and records the
    #: cleaner removed have offsets too but are never read.
    rereads: int | None = 0
    #: Source offsets the group had processed that the backup does not hold (recovery point gap).
    recovery_gap: int = 0
    #: Source offsets the group had not processed that a prune removed from the backup (its window
    #: starts above the committed offset): the group resumes at the window's first record.
    retention_gap: int = 0
    #: Single-record fetches the header-based binary search made.
    probes: int = 0
    notes: list[str] = Field(default_factory=list)

    @property
    def moves_backwards(self) -> bool:
        return (
            self.new_offset is not None
            and self.target_committed is not None
            and (self.new_offset < self.target_committed)
        )


class GroupReset(PlanModel):
    #: The group on the target whose offsets change.
    group_id: str
    #: The source group it takes its position from, when named differently (drill copies).
    source_group_id: str | None = None
    #: Group state on the target at planning time (Empty, Dead, Stable, ...).
    target_state: str | None = None
    partitions: list[PartitionReset]


class SourceOffsetsInfo(PlanModel):
    #: ``backup``: the group snapshot stored with a backup; ``live``: read from the source cluster.
    kind: Literal["backup", "live"]
    #: When the reading of the groups the offsets come from began.
    taken_at: str
    source_cluster: str
    backup_id: str | None = None
    storage_url: str | None = None
    bootstrap_servers: list[str] = Field(default_factory=list)
    #: The point in time asked for (``offset_reset.as_of``); None: the latest snapshot.
    as_of: str | None = None
    #: With ``as_of``: the interval of the backup's group history, the most the positions may lag
    #: ``as_of`` by (the groups may have committed between two readings); None: increments only.
    precision_secs: float | None = None


class TargetInfo(PlanModel):
    cluster_id: str | None
    bootstrap_servers: list[str]


class PartitionOffsets(PlanModel):
    topic: str
    partition: Partition
    log_start: Offset
    log_end: Offset


class ResetPlan(PlanModel):
    format: str = PLAN_FORMAT
    format_version: int = PLAN_VERSION
    created_at: str
    tool_version: str
    strategy: str
    source: SourceOffsetsInfo
    target: TargetInfo
    #: Every target partition the plan touches, as it was when planned.
    target_partitions: list[PartitionOffsets]
    groups: list[GroupReset]
    warnings: list[str] = Field(default_factory=list)

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()

    def totals(self) -> dict[str, int]:
        rows = [row for group in self.groups for row in group.partitions]
        return {
            "groups": len(self.groups),
            "partitions": len(rows),
            "changes": sum(
                1 for row in rows if row.new_offset is not None and row.new_offset != row.target_committed
            ),
            "rereads": sum(row.rereads or 0 for row in rows),
            "unknown_rereads": sum(1 for row in rows if row.rereads is None),
            "recovery_gap": sum(row.recovery_gap for row in rows),
            "retention_gap": sum(row.retention_gap for row in rows),
            "probes": sum(row.probes for row in rows),
        }

    def rereads_words(self) -> str:
        """The plan's re-reads for a summary line: records, or for a rewind the offsets it spans."""
        total = self.totals()["rereads"]
        if self.strategy == "rewind":
            return f"{total} offset(s) to re-read (markers and removed records included)"
        return f"{total} record(s) to re-read"


_COMMAND = "offset-reset plan"


def read_plan(path: str | Path) -> ResetPlan:
    """Load a plan file; every problem is a ConfigError naming the file."""
    return parse_plan(read_plan_bytes(path, _COMMAND), str(path))


def parse_plan(data: bytes, source: str) -> ResetPlan:
    """:func:`read_plan` of a file's bytes, ``source`` naming it in errors."""
    return parse_plan_document(
        data,
        source,
        ResetPlan,
        expected_format=PLAN_FORMAT,
        version=PLAN_VERSION,
        kind="reset plan",
        command=_COMMAND,
    )


def render_plan_table(plan: ResetPlan) -> str:
    """The plan as a table for review in a terminal or a pull request."""
    header = (
        f"{'group':<24} {'target partition':<28} {'source committed':<18} {'target now':>10} "
        f"{'new offset':>10} {'method':<13} {'origin at new':<20} {'re-read':>7} {'gap':>5}"
    )
    as_of = (
        f" as of {plan.source.as_of} (the reading of {plan.source.taken_at}"
        + (
            f"; groups read every {plan.source.precision_secs:g}s: one may have committed since"
            if plan.source.precision_secs is not None
            else "; groups read at each increment only"
        )
        + ")"
        if plan.source.as_of
        else f" taken {plan.source.taken_at}"
    )
    where = "rewound in place on" if plan.strategy == "rewind" else "target"
    lines = [
        f"reset plan ({plan.strategy}), source offsets from {plan.source.kind}{as_of}, "
        f"{where} cluster {plan.target.cluster_id}",
        header,
        "-" * len(header),
    ]
    for group in plan.groups:
        for row in group.partitions:
            committed = ",".join(
                f"{partition}:{'-' if offset is None else offset}"
                for partition, offset in row.source_committed.items()
            )
            origin = (
                f"{row.expected_origin.partition}@{row.expected_origin.offset}"
                if row.expected_origin
                else "(end)"
            )
            lines.append(
                f"{group.group_id:<24.24} {row.target_topic + '/' + str(row.target_partition):<28.28} "
                f"{committed:<18.18} {_show(row.target_committed):>10} {_show(row.new_offset):>10} "
                f"{row.method:<13} {origin:<20.20} {_show(row.rereads):>7} {row.recovery_gap:>5}"
            )
    totals = plan.totals()
    lines.append(
        f"{totals['groups']} group(s), {totals['partitions']} partition(s), {totals['changes']} change(s), "
        f"{plan.rereads_words()}, recovery gap {totals['recovery_gap']}"
        + (
            f", {totals['retention_gap']} unprocessed offset(s) removed by retention"
            if totals["retention_gap"]
            else ""
        )
    )
    lines.extend(f"warning: {warning}" for warning in plan.warnings)
    return "\n".join(lines)


def _show(value: int | None) -> str:
    return "-" if value is None else str(value)
