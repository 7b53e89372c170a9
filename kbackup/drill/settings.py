"""The ``drill`` section of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kbackup.core.config import StrictModel


class DrillSettings(StrictModel):
    """A disaster-recovery drill: restore under a prefix and prove every group's position."""

    topic_prefix: str = "drill."
    group_prefix: str = "drill."
    report_path: str = "drill-report.json"
    groups: list[str] = Field(default_factory=list)


class ThreePhaseSettings(StrictModel):
    """The three-phase restore: restore, map, move the groups, verify."""

    #: Where each phase's result is recorded, so an interrupted run continues where it stopped.
    state_dir: str = "three-phase-state"
    #: Build the Spark offset mapping always (re-read counts for every topic), or only when repartitioned.
    build_mapping: Literal["always", "when-needed"] = "always"
    #: Target group of source group G: ``group_prefix + G``.
    group_prefix: str = ""
