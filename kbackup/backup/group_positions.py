"""``describe --groups-history GROUP``: where one consumer group was over the time a backup covers.

Every reading of the groups the backup holds, oldest first: each increment's group-history
readings (``backup.group_snapshot_interval``; docs/format.md, "Group history"), then its own
snapshot. Consecutive readings where the group stood still are one row, from the first reading
that saw the position to the last; a reading that saw the group without any committed offset on
the backed-up topics is a row with no offsets.
"""

from __future__ import annotations

from typing import Any

from kbackup.core.errors import NotFoundError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.group_history import finest_interval, histories_of, positions_over_time
from kbackup.storage import Storage


def describe_group_history(storage: Storage, backup_id: str, group_id: str) -> dict[str, Any]:
    """The group's positions over time, as plain data (the CLI prints it as a table or JSON)."""
    backup = BackupCatalog(storage).load(backup_id)
    histories = histories_of(storage, backup.manifests, backup.keys)
    rows: list[dict[str, Any]] = []
    readings = 0
    seen = False
    for reading in positions_over_time(backup.manifests, histories):
        readings += 1
        taken_at, increment, source = reading.taken_at, reading.increment, reading.source
        offsets = sorted(reading.positions.get(group_id, {}).items())
        seen = seen or bool(offsets)
        listed = [
            {"topic": topic, "partition": partition, "offset": offset}
            for (topic, partition), offset in offsets
        ]
        if rows and rows[-1]["offsets"] == listed:
            rows[-1]["last_seen"] = taken_at
            rows[-1]["readings"] += 1
            continue
        rows.append(
            {
                "first_seen": taken_at,
                "last_seen": taken_at,
                "increment": increment,
                "source": source,
                "readings": 1,
                "offsets": listed,
            }
        )
    if not seen:
        raise NotFoundError(
            f"backup {backup_id} holds no committed offset of group {group_id} in any of its {readings} "
            "reading(s) of the groups",
            hint=f"'kafka-backup describe --backup-id {backup_id}' lists the groups of its latest snapshot",
        )
    while rows and not rows[0]["offsets"]:
        rows.pop(0)  # before the group's first commit: nothing to show
    return {
        "backup_id": backup_id,
        "group_id": group_id,
        "readings": readings,
        # The precision of a position: the group may have committed between two readings.
        "interval_secs": finest_interval(histories),
        "positions": rows,
    }
