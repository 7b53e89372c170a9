"""A retention policy: ``kafka-backup prune`` options and the ``backup.retention`` config section."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import Field, field_validator, model_validator

from kbackup.core.config import StrictModel
from kbackup.core.durations import Duration, DurationText
from kbackup.core.sizes import parse_size


class RetentionSettings(StrictModel):
    """What to keep. Rules across backups (``keep_*``) keep a backup id when any of them selects it,
    by the time of its last committed increment; rules inside a backup (``older_than``/``before``,
    ``max_total_bytes``) move the start of each backup's restorable window forward."""

    keep_last: int | None = Field(default=None, ge=0, description="Keep the N newest backups.")
    keep_within: DurationText | None = Field(
        default=None,
        description="Keep every backup committed within this duration of the newest one (`30d`), "
        "as restic does.",
    )
    keep_hourly: int | None = Field(
        default=None, ge=0, description="Keep the newest backup of each of the last N hours that have one."
    )
    keep_daily: int | None = Field(
        default=None, ge=0, description="Keep the newest backup of each of the last N days that have one."
    )
    keep_weekly: int | None = Field(
        default=None,
        ge=0,
        description="Keep the newest backup of each of the last N ISO weeks that have one.",
    )
    keep_monthly: int | None = Field(
        default=None, ge=0, description="Keep the newest backup of each of the last N months that have one."
    )
    older_than: DurationText | None = Field(
        default=None,
        description="Inside each backup: remove segments whose records are all older than this "
        "duration (`7d`).",
    )
    before: datetime | None = Field(
        default=None,
        description="Inside each backup: remove segments whose records all lie before this time "
        "(ISO 8601, UTC if no zone).",
    )
    max_total_bytes: int | str | None = Field(
        default=None,
        description="Inside each backup: remove its oldest segments until it stores at most this "
        "much (`50GiB`).",
    )
    orphan_grace: DurationText = Field(
        default="1h",
        description="Objects no manifest lists are removed only once older than this (a running "
        "backup's are younger).",
    )
    force: bool = Field(
        default=False, description="Allow a policy that would remove every backup, or everything inside one."
    )

    @field_validator("max_total_bytes", mode="before")
    @classmethod
    def _size(cls, value: object) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int | str):
            raise ValueError(f"{value!r} is not a size: write a number of bytes or a number and a unit")
        return parse_size(value)

    @field_validator("before")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RetentionSettings:
        if self.older_than is not None and self.before is not None:
            raise ValueError("older_than and before both set a cut time: give one of them")
        return self

    # -- what the policy says --------------------------------------------------------------------

    @property
    def across_backups(self) -> bool:
        """Whether any rule chooses among backup ids."""
        rules = (self.keep_last, self.keep_within, self.keep_hourly, self.keep_daily)
        return any(rule is not None for rule in (*rules, self.keep_weekly, self.keep_monthly))

    @property
    def inside_backups(self) -> bool:
        """Whether any rule moves the window inside a backup."""
        return self.older_than is not None or self.before is not None or self.max_total_bytes is not None

    @property
    def empty(self) -> bool:
        return not self.across_backups and not self.inside_backups

    def cut_time(self, now: datetime) -> datetime | None:
        """Records older than this go (``older_than`` from ``now``, or ``before``)."""
        if self.older_than is not None:
            return datetime.fromtimestamp(now.timestamp() - Duration.seconds_in(self.older_than), UTC)
        return self.before

    @property
    def orphan_grace_secs(self) -> float:
        return Duration.seconds_in(self.orphan_grace)

    @property
    def total_bytes_limit(self) -> int | None:
        return None if self.max_total_bytes is None else parse_size(self.max_total_bytes)

    def describe(self) -> dict[str, str | int | float | None]:
        """The rules that are set, as a retention generation records them (never a secret)."""
        found = self.model_dump(mode="json", exclude_none=True, exclude={"force"})
        return {key: value for key, value in found.items() if isinstance(value, str | int | float)}
