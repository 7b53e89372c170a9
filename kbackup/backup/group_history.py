"""A follow run's readings of the consumer groups between its increments.

``backup.group_snapshot_interval`` reads every group's committed offsets that often while the run
copies; each increment then stores the readings taken before its own snapshot in its
group-history file (docs/format.md, "Group history"). The rule that keeps them consistent with
the data: a reading taken before an increment read its end offsets holds only offsets committed
by then, which that increment's data covers (a committed offset never exceeds the end offset
that existed when it was committed). A reading taken later waits for the next increment; one a
stopped run's data does not cover is left out, as the increment's own snapshot would be.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbackup.core.errors import KBackupError, StorageError
from kbackup.core.logs import get_logger
from kbackup.core.times import parse_iso
from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import BackupKeys
from kbackup.format.group_history import (
    GroupHistory,
    build_history,
    encode_group_history,
    group_history_key,
    reference,
)
from kbackup.format.layout import object_key
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupHistoryRef
from kbackup.storage import Storage

log = get_logger("backup")


def offsets_beyond(snapshot: ConsumerGroupsSnapshot, ends: dict[TopicPartitionKey, int]) -> bool:
    """Whether any offset of ``snapshot`` is above what the backup holds of its partition."""
    return any(
        item.offset > ends.get((item.topic, item.partition), -1)
        for group in snapshot.groups
        for item in group.offsets
    )


@dataclass
class GroupHistoryRecorder:
    """Reads the groups every ``interval_secs`` while the run copies, and hands each increment the
    readings it stores."""

    #: Reads the groups' committed offsets on the given topics now (the increments' own snapshot).
    take: Callable[[list[str]], ConsumerGroupsSnapshot]
    interval_secs: float
    #: The topics the run copies now (set at each checkpoint).
    topics: list[str] = field(default_factory=list)
    #: Readings not yet stored with an increment, oldest first.
    pending: list[ConsumerGroupsSnapshot] = field(default_factory=list)
    _due: float = field(default=0.0, init=False)
    _warned: bool = field(default=False, init=False)

    def checkpoint(self, topics: list[str]) -> None:
        """An increment's own snapshot was just taken: the next reading is an interval later."""
        self.topics = list(topics)
        self._due = time.monotonic() + self.interval_secs

    def tick(self) -> None:
        """Read the groups if a reading is due (called between the copier's polls)."""
        now = time.monotonic()
        if not self.topics or now < self._due:
            return
        self._due = now + self.interval_secs
        try:
            self.pending.append(self.take(self.topics))
        except KBackupError as exc:
            # A reading missed leaves a wider step in the history, never a wrong position.
            if not self._warned:
                log.warning(
                    "a reading of the group history failed (its history has a gap there): %s", exc.message
                )
                self._warned = True

    def for_increment(
        self,
        own_snapshot: ConsumerGroupsSnapshot | None,
        ends: dict[TopicPartitionKey, int],
        *,
        partial: bool,
    ) -> list[ConsumerGroupsSnapshot]:
        """The readings the increment being committed stores: those taken before its own snapshot;
        of a stopped run's increment (``partial``), only as far as its data covers them."""
        before = parse_iso(own_snapshot.taken_at) if own_snapshot is not None else None
        chosen = []
        for reading in self.pending:
            if before is not None and parse_iso(reading.taken_at) >= before:
                break
            if partial and offsets_beyond(reading, ends):
                break  # the run stopped before its data caught up with this reading
            chosen.append(reading)
        return chosen

    def stored(self, readings: list[ConsumerGroupsSnapshot]) -> None:
        """``readings`` went into a committed increment: not stored again."""
        # for_increment chose a prefix of the pending readings, and none is taken during a commit.
        del self.pending[: len(readings)]


def write_group_history(storage: Storage, history: GroupHistory, keys: BackupKeys | None) -> GroupHistoryRef:
    """Store the file create-if-absent (before the manifest that will name it); its reference."""
    data = encode_group_history(history, keys)
    relative = group_history_key(history.increment, history.run_id, uuid.uuid4().hex[:8])
    if not storage.put_bytes_if_absent(object_key(history.backup_id, relative), data):
        raise StorageError(f"group history {history.backup_id}/{relative} exists already")
    return reference(history, relative, data)


def store_readings(
    storage: Storage,
    readings: list[ConsumerGroupsSnapshot],
    *,
    backup_id: str,
    increment: int,
    run_id: str,
    interval_secs: float,
    keys: BackupKeys | None,
) -> GroupHistoryRef | None:
    """The increment's group-history file written (None: no reading to store)."""
    if not readings:
        return None
    history = build_history(
        readings, backup_id=backup_id, increment=increment, run_id=run_id, interval_secs=interval_secs
    )
    return write_group_history(storage, history, keys)
