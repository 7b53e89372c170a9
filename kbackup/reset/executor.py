"""Applying a reviewed reset plan, and rolling it back.

Execute re-checks everything the plan assumed before changing anything:
the target is the cluster the plan was made for, no group has active
members, no group's offsets moved since planning, every new offset is inside
its partition, and nothing moves backwards unless allowed. Then it writes a
rollback snapshot of the groups' current offsets, commits the new offsets
with the admin API (in parallel for many groups), and reads them back.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import PreconditionError, VerificationError
from kbackup.core.faults import crash_point
from kbackup.core.kafka import Admin, PartitionRange, open_admin
from kbackup.core.types import TopicPartitionKey
from kbackup.format.manifest import utc_now_iso
from kbackup.format.reset_plan import ResetPlan
from kbackup.format.rollback_snapshot import (
    GroupSnapshotEntry,
    OffsetSnapshot,
    SnapshotOffset,
    write_snapshot,
)


@dataclass(frozen=True)
class OffsetChange:
    group_id: str
    topic: str
    partition: int
    before: int | None
    #: None: the partition has no committed offset afterwards (a rollback to "never committed").
    after: int | None


@dataclass
class ExecuteResult:
    changes: list[OffsetChange] = field(default_factory=list)
    #: Rows already at their new offset (a plan applied before): nothing to do.
    already_applied: int = 0
    snapshot_id: str | None = None
    snapshot_path: str | None = None
    dry_run: bool = False


def _check_target(plan_cluster: str | None, admin: Admin, connection: KafkaConnection) -> None:
    actual = admin.cluster_id()
    if plan_cluster != actual:
        raise PreconditionError(
            f"the plan was made for cluster {plan_cluster}, but {','.join(connection.bootstrap_servers)} "
            f"is cluster {actual}",
            hint="point --bootstrap-servers at the cluster the plan was made for, or make a new plan",
        )


def _refuse_active_groups(admin: Admin, group_ids: list[str]) -> None:
    active = [
        description for description in admin.describe_groups(group_ids).values() if description.is_active
    ]
    if active:
        named = "; ".join(
            f"{d.group_id} ({d.state}, members: {', '.join(d.members) or 'none listed'})" for d in active
        )
        raise PreconditionError(
            f"consumer group(s) with active members on the target: {named}",
            hint="stop those consumers (their offsets cannot be changed while they run), then run again",
        )


def execute_plan(
    plan: ResetPlan,
    connection: KafkaConnection,
    *,
    snapshot_dir: Path,
    dry_run: bool = False,
    allow_rewind: bool = False,
    parallelism: int = 8,
) -> ExecuteResult:
    admin = open_admin(connection)
    _check_target(plan.target.cluster_id, admin, connection)
    group_ids = [group.group_id for group in plan.groups]
    _refuse_active_groups(admin, group_ids)

    planned_ranges = {(item.topic, item.partition): item for item in plan.target_partitions}
    live_ranges = admin.partition_ranges(planned_ranges)
    problems: list[str] = []
    for key, planned in planned_ranges.items():
        live = live_ranges[key]
        if live.log_end < planned.log_end or live.log_start > planned.log_start:
            problems.append(
                f"{key[0]}/{key[1]} was {planned.log_start}..{planned.log_end} when planned, "
                f"now {live.log_start}..{live.log_end}"
            )

    result = ExecuteResult(dry_run=dry_run)
    current_by_group: dict[str, dict[TopicPartitionKey, int]] = {}
    wanted_by_group: dict[str, dict[TopicPartitionKey, int]] = {}
    for group in plan.groups:
        current = admin.committed_offsets(group.group_id)
        current_by_group[group.group_id] = current
        wanted: dict[TopicPartitionKey, int] = {}
        for row in group.partitions:
            if row.new_offset is None:
                continue
            key = (row.target_topic, row.target_partition)
            now = current.get(key)
            if now == row.new_offset:
                result.already_applied += 1
                continue
            problem = _move_problem(
                group.group_id, key, now, row.target_committed, row.new_offset, live_ranges[key], allow_rewind
            )
            if problem is not None:
                problems.append(problem)
            wanted[key] = row.new_offset
            result.changes.append(OffsetChange(group.group_id, key[0], key[1], now, row.new_offset))
        if wanted:
            wanted_by_group[group.group_id] = wanted
    if problems:
        raise PreconditionError(
            "the plan no longer matches the target, nothing was changed:\n  " + "\n  ".join(problems),
            hint="make a new plan with 'kafka-backup offset-reset plan'",
        )
    if dry_run or not wanted_by_group:
        return result

    snapshot = OffsetSnapshot(
        snapshot_id=f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
        created_at=utc_now_iso(),
        target_cluster_id=plan.target.cluster_id,
        bootstrap_servers=connection.bootstrap_servers,
        plan_created_at=plan.created_at,
        groups=[
            GroupSnapshotEntry(
                group_id=group_id,
                offsets=_offset_list(current_by_group[group_id]),
                changed=_offset_list({key: current_by_group[group_id].get(key, -1) for key in wanted}),
            )
            for group_id, wanted in wanted_by_group.items()
        ],
    )
    result.snapshot_id = snapshot.snapshot_id
    result.snapshot_path = str(write_snapshot(snapshot, snapshot_dir))
    _apply(admin, wanted_by_group, parallelism)
    _verify(admin, wanted_by_group)
    return result


def _move_problem(
    group_id: str,
    key: TopicPartitionKey,
    now: int | None,
    planned_from: int | None,
    new_offset: int,
    live: PartitionRange,
    allow_rewind: bool,
) -> str | None:
    """Why moving a group's offset in one partition from ``now`` to ``new_offset`` no longer
    matches the plan (None: it does)."""
    if now != planned_from:
        return f"group {group_id} on {key[0]}/{key[1]} is at {now}, the plan expected {planned_from}"
    if now is not None and new_offset < now and not allow_rewind:
        return (
            f"group {group_id} on {key[0]}/{key[1]} would move backwards from {now} "
            f"to {new_offset} (pass --allow-rewind to allow it)"
        )
    if not live.log_start <= new_offset <= live.log_end:
        return (
            f"new offset {new_offset} of group {group_id} is outside {key[0]}/{key[1]}'s "
            f"range {live.log_start}..{live.log_end}"
        )
    return None


def _offset_list(offsets: dict[TopicPartitionKey, int]) -> list[SnapshotOffset]:
    return [SnapshotOffset(topic=t, partition=p, offset=o) for (t, p), o in sorted(offsets.items())]


def _apply(admin: Admin, wanted_by_group: dict[str, dict[TopicPartitionKey, int]], parallelism: int) -> None:
    groups = list(wanted_by_group.items())
    # The first group alone, then the rest in parallel: a crash test can stop between the two.
    admin.alter_offsets(*groups[0])
    crash_point("reset:after-first-group")
    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        futures = [pool.submit(admin.alter_offsets, group, wanted) for group, wanted in groups[1:]]
        for future in futures:
            future.result()


def _verify(admin: Admin, wanted_by_group: dict[str, dict[TopicPartitionKey, int]]) -> None:
    differences = []
    for group, wanted in wanted_by_group.items():
        now = admin.committed_offsets(group)
        for key, offset in wanted.items():
            if now.get(key) != offset:
                differences.append(
                    f"group {group} on {key[0]}/{key[1]}: committed {now.get(key)}, wanted {offset}"
                )
    if differences:
        raise VerificationError("offsets read back differ from the plan:\n  " + "\n  ".join(differences))


def rollback(
    snapshot: OffsetSnapshot, connection: KafkaConnection, *, dry_run: bool = False
) -> list[OffsetChange]:
    """Put every group of a snapshot back to exactly the offsets it had before execute."""
    admin = open_admin(connection)
    _check_target(snapshot.target_cluster_id, admin, connection)
    _refuse_active_groups(admin, [group.group_id for group in snapshot.groups])
    changes: list[OffsetChange] = []
    for group in snapshot.groups:
        before = {(item.topic, item.partition): item.offset for item in group.offsets}
        changed = [(item.topic, item.partition) for item in group.changed]
        now = admin.committed_offsets(group.group_id)
        changes.extend(
            OffsetChange(group.group_id, key[0], key[1], now.get(key), before.get(key))
            for key in changed
            if now.get(key) != before.get(key)
        )
        if dry_run:
            continue
        if any(key not in before for key in changed):
            # No per-partition offset delete in the client: delete the (empty) group and re-commit
            # every offset it had, which restores "no commit" on the partitions that had none.
            admin.delete_group(group.group_id)
            if before:
                admin.alter_offsets(group.group_id, before)
        else:
            admin.alter_offsets(group.group_id, {key: before[key] for key in changed})
        after = admin.committed_offsets(group.group_id)
        wrong = sorted({key for key in [*changed, *before] if after.get(key) != before.get(key)})
        if wrong:
            raise VerificationError(
                f"rollback of group {group.group_id} did not restore "
                + ", ".join(f"{t}/{p} (now {after.get((t, p))}, was {before.get((t, p))})" for t, p in wrong)
            )
    return changes
