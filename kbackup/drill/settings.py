"""The ``drill`` section of a config file."""

from __future__ import annotations

from pydantic import Field

from kbackup.core.config import StrictModel


class DrillSettings(StrictModel):
    """A disaster-recovery drill: restore under a prefix and prove every group's position."""

    topic_prefix: str = "drill."
    group_prefix: str = "drill."
    report_path: str = "drill-report.json"
    groups: list[str] = Field(default_factory=list)
