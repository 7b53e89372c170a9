"""Stage 4, reset: plan, execute and roll back consumer-group offset resets on the target.

What it offers:

- plan: :func:`plan_offset_reset` turns a :class:`PlanRequest` into a
  :class:`kbackup.format.reset_plan.ResetPlan`, changing nothing. Its inputs: the source groups'
  committed offsets (:class:`SourceOffsets`, read by :func:`from_live_source` or
  :func:`from_backup`, or as they were at a point in time by :func:`from_backup_as_of`;
  :func:`timestamps_from_backup` for the timestamp strategies) and, for
  ``strategy: from-mapping``, an offset mapping file (:func:`load_mapping_index`).
- execute: :func:`execute_plan` writes a rollback snapshot, then moves the groups
  (:class:`ExecuteResult`).
- rollback: :func:`rollback` moves the groups back to the offsets a snapshot holds.
"""

from kbackup.reset.executor import ExecuteResult, execute_plan, rollback
from kbackup.reset.mapping_input import load_mapping_index
from kbackup.reset.planner import MAPPING_HINT, MappingIndex, PlanRequest, plan_offset_reset
from kbackup.reset.sources import (
    SourceOffsets,
    from_backup,
    from_backup_as_of,
    from_live_source,
    timestamps_from_backup,
)

__all__ = [
    "MAPPING_HINT",
    "ExecuteResult",
    "MappingIndex",
    "PlanRequest",
    "SourceOffsets",
    "execute_plan",
    "from_backup",
    "from_backup_as_of",
    "from_live_source",
    "load_mapping_index",
    "plan_offset_reset",
    "rollback",
    "timestamps_from_backup",
]
