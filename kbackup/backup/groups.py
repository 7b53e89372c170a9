"""The snapshot of consumer groups' committed offsets on the backed-up topics.

Taken before the run reads the end offsets it copies up to (see
docs/format.md, "Consistency"): a committed offset never exceeds the end
offset that existed when it was committed, so every offset in the snapshot
is covered by the data of the increment that holds it.
"""

from __future__ import annotations

from collections.abc import Collection

from kbackup.core.kafka import Admin
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, utc_now_iso


def snapshot_consumer_groups(admin: Admin, topics: Collection[str]) -> ConsumerGroupsSnapshot:
    """Committed offsets of every consumer group that has one on ``topics``.

    A listing some broker did not answer fails the snapshot (it would silently move fewer groups
    across); a group deleted between the listing and reading its offsets is simply not in it.
    """
    taken_at = utc_now_iso()
    wanted = set(topics)
    states = admin.list_groups()
    snapshots: list[GroupSnapshot] = []
    for group_id, committed in sorted(admin.group_offsets(states).items()):
        offsets = [
            GroupOffset(
                topic=item.topic,
                partition=item.partition,
                offset=item.offset,
                metadata=item.metadata,
                leader_epoch=item.leader_epoch,
            )
            for item in committed
            if item.topic in wanted
        ]
        if offsets:
            offsets.sort(key=lambda item: (item.topic, item.partition))
            snapshots.append(GroupSnapshot(group_id=group_id, state=states[group_id], offsets=offsets))
    return ConsumerGroupsSnapshot(taken_at=taken_at, groups=snapshots, finished_at=utc_now_iso())
