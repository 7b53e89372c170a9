"""``restore.as_of`` and ``three-phase-restore --as-of`` (docs/restore.md, "As of a time"): the
records stamped at or before the time, the groups of the same moment, a zone required, and a time
after what the backup holds refused before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import three_phase_config
from kbackup.core.errors import ConfigError, PreconditionError
from kbackup.format.catalog import BackupCatalog
from kbackup.restore.plan import check_as_of
from kbackup.restore.settings import RestoreSettings
from kbackup.storage import LocalStorage
from tests.support.metadata_backups import commit_increment, day_of


def test_the_cut_is_the_millisecond_after_the_time() -> None:
    settings = RestoreSettings.model_validate({"as_of": "2026-11-27T13:59:59.999Z"})
    at_ms = int(datetime(2026, 11, 27, 13, 59, 59, 999000, tzinfo=UTC).timestamp() * 1000)
    assert settings.time_end == at_ms + 1  # a record stamped 13:59:59.999 is restored, 14:00:00.000 not
    assert RestoreSettings.model_validate({"as_of": "2026-11-27T14:59:59.999+01:00"}).time_end == at_ms + 1
    assert RestoreSettings(time_window_end=at_ms).time_end == at_ms
    assert RestoreSettings().time_end is None


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"as_of": "2026-11-27T13:59:00"}, "has no time zone"),
        ({"as_of": "2026-11-27T13:59:00Z", "time_window_end": 1}, "as_of and time_window_end both"),
        ({"as_of": "2026-11-27T13:59:00Z", "time_window_start": "2026-11-28T00:00:00Z"}, "must be after"),
    ],
)
def test_a_bad_as_of_is_refused_when_the_config_is_read(values: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        RestoreSettings.model_validate(values)


def test_a_three_phase_restore_as_of_a_time_moves_the_groups_of_that_time(tmp_path: Path) -> None:
    base = KBackupConfig.model_validate(
        {"backup_id": "b", "storage": {"url": str(tmp_path)}, "target": {"bootstrap_servers": ["t:9092"]}}
    )
    flagged = three_phase_config(base, as_of="2026-11-27T13:59:00Z")
    assert flagged.restore.as_of == flagged.offset_reset.as_of == datetime(2026, 11, 27, 13, 59, tzinfo=UTC)
    unchanged = three_phase_config(base)
    assert unchanged.restore.as_of is None
    assert unchanged.offset_reset.as_of is None
    both = base.model_copy(
        update={
            "offset_reset": base.offset_reset.model_copy(update={"as_of": datetime(2026, 1, 1, tzinfo=UTC)})
        }
    )
    with pytest.raises(ConfigError, match=r"restore.as_of .* and offset_reset.as_of .* differ"):
        three_phase_config(both, as_of="2026-11-27T13:59:00Z")


def test_a_time_after_what_the_backup_holds_is_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    for increment in range(2):
        commit_increment(storage, tmp_path, increment)
    backup = BackupCatalog(storage).load("b")
    covered = datetime.fromisoformat(backup.latest.started_at)
    check_as_of(backup, covered)  # at the moment its last increment started: held
    check_as_of(backup, day_of(0))
    with pytest.raises(PreconditionError, match="is after what backup b holds: its last increment read"):
        check_as_of(backup, day_of(5))
