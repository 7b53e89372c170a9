"""The group history of an increment: consumer groups' committed offsets between two increments.

docs/format.md, "Group history", is the contract. ``backup.group_snapshot_interval`` makes a
follow run read every group's committed offsets more often than it commits increments; the
readings taken before an increment's own snapshot are stored with that increment, in one file
written before its manifest (which names it with its size and SHA-256), create-if-absent, never
rewritten. Only changes are stored: the file's first reading holds every group's offsets, each
later one only the offsets that moved, appeared or went since the reading before it, so each
file reads on its own (a prune that deletes an older increment leaves the next one whole). An
encrypted backup's file is sealed like its manifests, under a key of its own per increment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import BackupKeys
from kbackup.format.increment_files import IncrementDocument, IncrementFileKind
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupHistoryRef, Manifest, ManifestModel
from kbackup.storage import Storage

GROUP_HISTORY_FORMAT = "kafka-backup-group-history"
#: Readers refuse a group-history file of a higher version.
GROUP_HISTORY_VERSION = 1
GROUP_HISTORY_FOLDER = "groups"

#: Every group's committed offset per partition at one moment: group id -> (topic, partition) -> offset.
Positions = dict[str, dict[TopicPartitionKey, int]]


class GroupChange(ManifestModel):
    """What one group's committed offsets became since the reading before (in a file's first
    reading: all of them)."""

    group_id: str
    #: topic -> partition (as text: a JSON key) -> committed offset, for each offset set or moved.
    offsets: dict[str, dict[str, int]] = Field(default_factory=dict)
    #: topic -> partitions whose committed offset went (deleted, expired, or the group deleted).
    removed: dict[str, list[int]] = Field(default_factory=dict)


class HistoryReading(ManifestModel):
    #: When its first request was sent (ISO 8601, UTC): every offset in it was committed by then
    #: or during the reading, never after it ended.
    taken_at: str
    changes: list[GroupChange] = Field(default_factory=list)
    #: When its last answer came: every offset in it was committed by then.
    finished_at: str | None = None


class GroupHistory(IncrementDocument):
    format: str = GROUP_HISTORY_FORMAT
    format_version: int = GROUP_HISTORY_VERSION
    backup_id: str
    increment: int
    run_id: str
    #: ``backup.group_snapshot_interval`` in seconds: the precision of a position read from it.
    interval_secs: float
    readings: list[HistoryReading] = Field(default_factory=list)


def positions_of(snapshot: ConsumerGroupsSnapshot) -> Positions:
    """A group snapshot's committed offsets as positions."""
    return {
        group.group_id: {(item.topic, item.partition): item.offset for item in group.offsets}
        for group in snapshot.groups
    }


def changes_between(before: Positions, after: Positions) -> list[GroupChange]:
    """What moved from ``before`` to ``after``, group by group (sorted; unchanged groups left out)."""
    changes = []
    for group_id in sorted(before.keys() | after.keys()):
        old, new = before.get(group_id, {}), after.get(group_id, {})
        offsets: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(new.items()):
            if old.get((topic, partition)) != offset:
                offsets.setdefault(topic, {})[str(partition)] = offset
        removed: dict[str, list[int]] = {}
        for topic, partition in sorted(old.keys() - new.keys()):
            removed.setdefault(topic, []).append(partition)
        if offsets or removed:
            changes.append(GroupChange(group_id=group_id, offsets=offsets, removed=removed))
    return changes


def build_history(
    snapshots: Sequence[ConsumerGroupsSnapshot],
    *,
    backup_id: str,
    increment: int,
    run_id: str,
    interval_secs: float,
) -> GroupHistory:
    """The file of ``snapshots`` (oldest first): the first whole, then each one's changes."""
    readings = []
    previous: Positions = {}
    for snapshot in snapshots:
        current = positions_of(snapshot)
        readings.append(
            HistoryReading(
                taken_at=snapshot.taken_at,
                changes=changes_between(previous, current),
                finished_at=snapshot.finished_at,
            )
        )
        previous = current
    return GroupHistory(
        backup_id=backup_id,
        increment=increment,
        run_id=run_id,
        interval_secs=interval_secs,
        readings=readings,
    )


def replay(history: GroupHistory) -> Iterator[tuple[HistoryReading, Positions]]:
    """Each reading and every group's positions then (the changes applied in order)."""
    current: Positions = {}
    for reading in history.readings:
        for change in reading.changes:
            group = current.setdefault(change.group_id, {})
            for topic, partitions in change.removed.items():
                for partition in partitions:
                    group.pop((topic, partition), None)
            for topic, moved in change.offsets.items():
                for text, offset in moved.items():
                    group[(topic, int(text))] = offset
            if not group:
                del current[change.group_id]
        yield reading, {group_id: dict(offsets) for group_id, offsets in current.items()}


@dataclass(frozen=True)
class GroupsReading:
    """One reading of every group's positions a backup holds."""

    taken_at: str
    #: When its last answer came (None: not recorded, a backup written before it was).
    finished_at: str | None
    increment: int
    #: ``history`` (the increment's group history) or ``increment`` (its own snapshot).
    source: str
    positions: Positions

    @property
    def known_by(self) -> str:
        """The moment by which every offset in it was committed (its start when its end is unknown)."""
        return self.finished_at or self.taken_at


def group_history_key(increment: int, run_id: str, token: str) -> str:
    """Relative to the backup's folder, like a segment's key; the run id and the writer's own
    token keep any two files apart."""
    return f"{GROUP_HISTORY_FOLDER}/{increment:08d}-{run_id}-{token}.json"


KIND = IncrementFileKind(
    what="group history",
    format=GROUP_HISTORY_FORMAT,
    version=GROUP_HISTORY_VERSION,
    purpose="group-history",
    indent=None,  # compact: a file can hold thousands of readings
)


def encode_group_history(history: GroupHistory, keys: BackupKeys | None) -> bytes:
    """The file's bytes: compact JSON, or for an encrypted backup its identity and the whole
    document sealed with that identity as authenticated data."""
    return KIND.encode(history, keys)


def reference(history: GroupHistory, key: str, data: bytes) -> GroupHistoryRef:
    """What the manifest says of the file it names: where, its size and checksum, its span."""
    return GroupHistoryRef(
        key=key,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        readings=len(history.readings),
        first_taken_at=history.readings[0].taken_at if history.readings else None,
        last_taken_at=history.readings[-1].taken_at if history.readings else None,
        interval_secs=history.interval_secs,
    )


def parse_group_history(
    data: bytes, ref: GroupHistoryRef, *, backup_id: str, increment: int, run_id: str, keys: BackupKeys | None
) -> GroupHistory:
    """The file a manifest names, checked against the manifest (size, SHA-256, identity); every
    problem is one BackupIntegrityError naming the object."""
    return KIND.parse(
        GroupHistory, data, ref, backup_id=backup_id, increment=increment, run_id=run_id, keys=keys
    )


def read_group_history(storage: Storage, manifest: Manifest, keys: BackupKeys | None) -> GroupHistory | None:
    """The group-history file ``manifest`` names, checked (None: the increment has none); ``keys``
    are an encrypted backup's (``Backup.keys``)."""
    return KIND.read(GroupHistory, storage, manifest, manifest.group_history, keys)


def histories_of(
    storage: Storage, manifests: Sequence[Manifest], keys: BackupKeys | None
) -> dict[int, GroupHistory]:
    """Every group-history file the manifests name, read and checked, by increment."""
    histories = {}
    for manifest in manifests:
        history = read_group_history(storage, manifest, keys)
        if history is not None:
            histories[manifest.increment] = history
    return histories


def finest_interval(histories: Mapping[int, GroupHistory]) -> float | None:
    """The shortest interval the histories were read at (None: none), the precision claimed."""
    return min((history.interval_secs for history in histories.values()), default=None)


def positions_over_time(
    manifests: Sequence[Manifest], histories: Mapping[int, GroupHistory]
) -> Iterator[GroupsReading]:
    """Every reading of the groups a backup holds, oldest first; each increment's history readings
    come before its own snapshot."""
    for manifest in manifests:
        history = histories.get(manifest.increment)
        if history is not None:
            for reading, positions in replay(history):
                yield GroupsReading(
                    reading.taken_at, reading.finished_at, manifest.increment, "history", positions
                )
        if manifest.consumer_groups is not None:
            snapshot = manifest.consumer_groups
            yield GroupsReading(
                snapshot.taken_at,
                snapshot.finished_at,
                manifest.increment,
                "increment",
                positions_of(snapshot),
            )
