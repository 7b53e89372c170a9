"""The ``drill`` section of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kbackup.core.config import StrictModel


class DrillSettings(StrictModel):
    """A disaster-recovery drill: restore under a prefix and prove every group's position."""

    topic_prefix: str = Field(
        default="drill.", description="Source topic T is restored to the target as `topic_prefix + T`."
    )
    group_prefix: str = Field(
        default="drill.", description="Source group G is moved on the target as `group_prefix + G`."
    )
    report_path: str = Field(
        default="drill-report.json",
        description="Where the JSON report is written (an HTML chart beside it); `--report` overrides it.",
    )
    groups: list[str] = Field(
        default_factory=list,
        description=(
            "Groups to drill; empty: `offset_reset.groups`, else every group in the backup's snapshot."
        ),
    )


class ThreePhaseSettings(StrictModel):
    """The three-phase restore: restore, move the groups and verify them, then map and audit."""

    state_dir: str = Field(
        default="three-phase-state",
        description=(
            "Where each phase's result is recorded, so an interrupted run continues where it "
            "stopped; `--state-dir` overrides it."
        ),
    )
    build_mapping: Literal["audit", "always", "when-needed"] = Field(
        default="audit",
        description=(
            "`audit`: move the groups by the header search right after the restore, then build the "
            "Spark offset mapping as the audit that recounts every committed position (exit 15 if it "
            "disagrees); a repartitioned topic's groups are found by one search per source partition. "
            "`always`: build the mapping before moving any group, and place repartitioned topics' "
            "groups from it. `when-needed`: only when a topic was repartitioned, no audit."
        ),
    )
    group_prefix: str = Field(
        default="", description="Source group G is moved on the target as `group_prefix + G`."
    )
    accept_gap: bool = Field(
        default=False,
        description=(
            "Finish with exit 0 when groups resume after a recovery gap (they had processed records "
            "the backup does not hold); unset: exit 12. `--accept-gap` sets it."
        ),
    )
