"""Plan, execute and roll back resets on the real target cluster, judged by the reference formula."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.core.errors import PreconditionError
from kbackup.core.progress import Progress
from kbackup.format.reset_plan import ResetPlan, read_plan
from kbackup.format.rollback_snapshot import list_snapshots
from kbackup.offsets.translate import RestoredRecord, measure
from kbackup.reset.executor import execute_plan, rollback
from kbackup.reset.planner import PlanRequest, mapping_index, plan_offset_reset
from kbackup.reset.probe import PartitionProbe
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.identity_restore import P0, P1, SOURCE, fill_identity_restore, source_offsets
from tests.support.kafka_io import create_topic, group_position
from tests.support.oracles import ranges_from_records, reference_position
from tests.support.restored_topics import Restored, read_as_group, restored_records, write_restored

GROUPS = {
    "at-zero": {0: 0, 1: 0},
    "below-backup": {0: 3, 1: 4},
    "in-hole": {0: 10, 1: 9},
    "mid": {0: 16, 1: 10},
    "on-marker": {0: 31, 1: 5},
    "at-end": {0: 32, 1: 10},
    "beyond-backup": {0: 40, 1: 2},
    "never-on-p0": {1: 7},
}


def prefixed(groups: dict[str, dict[int, int]], prefix: str) -> dict[str, dict[int, int]]:
    return {f"{prefix}-{name}": offsets for name, offsets in groups.items()}


def assert_groups_resume_without_loss(
    cluster: LocalKafkaCluster,
    topic: str,
    groups: dict[str, dict[int, int]],
    records: dict[int, list[RestoredRecord]],
    plan: ResetPlan,
) -> None:
    """A consumer of each group, resuming from its committed offsets, reads every record the group had
    not processed on the source, in order, and re-reads exactly as many as the plan said."""
    rereads = {(g.group_id, r.target_partition): r.rereads for g in plan.groups for r in g.partitions}
    for group, offsets in groups.items():
        read = read_as_group(cluster, group, topic, sorted(records), SOURCE)
        for partition, held in records.items():
            committed = {("orders", p): c for p, c in offsets.items()}
            unprocessed = [r for r in held if r.source_offset >= committed.get(r.source, 0)]
            assert [
                r for r in read[partition] if r.source_offset >= committed.get(r.source, 0)
            ] == unprocessed, (
                group,
                partition,
            )
            read_again = [r for r in read[partition] if r.source_offset < committed.get(r.source, 0)]
            assert len(read_again) == rereads[(group, partition)], (group, partition)


def test_identity_restore_every_group_resumes_exactly(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    fill_identity_restore(target_cluster, topic)
    groups = prefixed(GROUPS, unique_name)
    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(),
            source=source_offsets(groups),
            topic_mapping={"orders": topic},
        )
    )
    plan_path = tmp_path / "plan.json"
    plan_path.write_bytes(plan.to_json_bytes())
    plan = read_plan(plan_path)  # what execute reads is what was reviewed
    rows = {(g.group_id, r.target_partition): r for g in plan.groups for r in g.partitions}
    assert all(r.method == "binary-search" for r in rows.values())
    assert rows[(f"{unique_name}-beyond-backup", 0)].recovery_gap == 8
    assert rows[(f"{unique_name}-at-end", 0)].recovery_gap == 0
    assert rows[(f"{unique_name}-never-on-p0", 0)].source_committed == {0: None}

    result = execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path / "snapshots")
    assert result.snapshot_id is not None
    assert len(result.changes) == len(rows)

    for partition in (0, 1):
        records = restored_records(target_cluster, topic, partition, SOURCE)
        assert len(records) == len(P0 if partition == 0 else P1)  # aborted records are not visible
        for group, offsets in groups.items():
            committed = {("orders", partition): offsets.get(partition, 0)}
            position = group_position(target_cluster, group, topic, partition)
            assert position == reference_position(records, committed), (group, partition)
            assert position is not None
            outcome = measure(records, committed, position)
            assert (outcome.skipped, outcome.reprocessed) == (0, 0), (group, partition)
            assert rows[(group, partition)].rereads == 0
            # The plan names the origin of the record the group will read first (none past the end).
            at_position = [r.source_offset for r in records if r.target_offset == position]
            expected = rows[(group, partition)].expected_origin
            planned = [expected.offset] if expected is not None else []
            assert planned == at_position, (group, partition)

    # Applications restarted in these groups read on from there: nothing skipped, nothing read twice.
    assert_groups_resume_without_loss(
        target_cluster,
        topic,
        groups,
        {p: restored_records(target_cluster, topic, p, SOURCE) for p in (0, 1)},
        plan,
    )

    # A plan applied twice is a no-op the second time.
    again = execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path / "snapshots")
    assert again.changes == []
    assert again.already_applied == len(rows)

    # Rollback restores the exact previous state: these groups had no offsets at all before.
    snapshots = list_snapshots(tmp_path / "snapshots")
    assert [s.snapshot_id for s in snapshots] == [result.snapshot_id]
    rollback(snapshots[0], target_cluster.connection())
    for group in groups:
        assert group_position(target_cluster, group, topic, 0) is None
        assert group_position(target_cluster, group, topic, 1) is None


def test_repartitioned_restore_uses_the_mapping_and_counts_rereads(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    create_topic(target_cluster, topic, partitions=3)
    # Two source partitions spread over three target partitions, interleaved.
    batch = []
    for number in range(30):
        source_partition = number % 2
        batch.append(Restored(number % 3, source_partition, 100 + number // 2))
    write_restored(target_cluster, topic, "orders", SOURCE, [(batch, True)], transactional_id=f"r-{topic}")
    records = {q: restored_records(target_cluster, topic, q, SOURCE) for q in range(3)}
    index = mapping_index(item for q in range(3) for item in ranges_from_records(records[q], topic, q))
    groups = {f"{unique_name}-a": {0: 105, 1: 110}, f"{unique_name}-b": {0: 100}}
    source = source_offsets(groups)
    source.backup_end = {("orders", 0): 115, ("orders", 1): 115}

    with pytest.raises(Exception, match="needs the offset mapping"):
        plan_offset_reset(PlanRequest(target=target_cluster.connection(), source=source,
                                      topic_mapping={"orders": topic}))  # fmt: skip
    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(), source=source, topic_mapping={"orders": topic}, mapping=index
        )
    )
    execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path / "s")
    for group, offsets in groups.items():
        committed = {("orders", p): offsets.get(p, 0) for p in (0, 1)}
        for q in range(3):
            position = group_position(target_cluster, group, topic, q)
            assert position == reference_position(records[q], committed)
            assert position is not None
            outcome = measure(records[q], committed, position)
            row = next(
                r for g in plan.groups if g.group_id == group for r in g.partitions if r.target_partition == q
            )
            assert outcome.skipped == 0
            assert row.rereads == outcome.reprocessed
            assert row.method == "mapping"


def test_execute_refuses_active_group_stale_plan_and_other_cluster(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    fill_identity_restore(target_cluster, topic)
    group = f"{unique_name}-live"
    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(),
            source=source_offsets({group: {0: 12, 1: 3}}),
            topic_mapping={"orders": topic},
        )
    )
    # Another cluster: refused by cluster id.
    with pytest.raises(PreconditionError, match="the plan was made for cluster"):
        execute_plan(plan, source_cluster.connection(), snapshot_dir=tmp_path)

    # An active member: refused, naming the group.
    consumer = Consumer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group, "client.id": "busy-app"}
    )
    consumer.subscribe([topic])
    try:
        for _ in range(40):
            consumer.poll(0.25)
        with pytest.raises(PreconditionError, match=f"{group} .*busy-app"):
            execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
    finally:
        consumer.close()

    # The group moved on after the plan was made: the plan is stale.
    Consumer_ = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
    Consumer_.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    Consumer_.close()
    with pytest.raises(PreconditionError, match="the plan expected"):
        execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
    assert group_position(target_cluster, group, topic, 0) == 1  # nothing changed
    assert list_snapshots(tmp_path) == []


def test_rewind_needs_permission(target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-orders"
    fill_identity_restore(target_cluster, topic)
    group = f"{unique_name}-ahead"
    committer = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)
    committer.close()
    plan: ResetPlan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(),
            source=source_offsets({group: {0: 6}}),
            topic_mapping={"orders": topic},
        )
    )
    with pytest.raises(PreconditionError, match="would move backwards from 15"):
        execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
    result = execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path, allow_rewind=True)
    assert any(change.before == 15 for change in result.changes)
    # Rollback puts back exactly 15 on partition 0 and removes the new commit on partition 1.
    rollback(list_snapshots(tmp_path)[0], target_cluster.connection())
    assert group_position(target_cluster, group, topic, 0) == 15
    assert group_position(target_cluster, group, topic, 1) is None


def test_repartitioned_restore_with_the_spark_mapping_file(
    spark: Any,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
) -> None:
    from kbackup.format.mapping_file import write_mapping
    from kbackup.mapping import build_offset_mapping
    from kbackup.reset.mapping_input import load_mapping_index

    topic = f"{unique_name}-orders"
    create_topic(target_cluster, topic, partitions=3)
    batches = [
        ([Restored(i % 3, i % 2, 200 + i // 2) for i in range(start, start + 20)], start != 20)
        for start in range(0, 60, 20)
    ]  # the middle transaction is aborted: holes on the target side
    write_restored(target_cluster, topic, "orders", SOURCE, batches, transactional_id=f"m-{topic}")
    mapping = build_offset_mapping(
        target_cluster.connection(), source_cluster=SOURCE, topics=[topic], spark=spark
    )
    mapping_file = tmp_path / "mapping.json"
    write_mapping(mapping, mapping_file, "json")
    index = load_mapping_index(mapping_file, SOURCE)

    groups = {f"{unique_name}-x": {0: 205, 1: 221}, f"{unique_name}-y": {1: 203}}
    source = source_offsets(groups)
    source.backup_end = {("orders", 0): 230, ("orders", 1): 230}
    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(), source=source, topic_mapping={"orders": topic}, mapping=index
        )
    )
    execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path / "s")
    records = {q: restored_records(target_cluster, topic, q, SOURCE) for q in range(3)}
    for group, offsets in groups.items():
        committed = {("orders", p): offsets.get(p, 0) for p in (0, 1)}
        for q in range(3):
            position = group_position(target_cluster, group, topic, q)
            assert position == reference_position(records[q], committed), (group, q)
            row = next(
                r for g in plan.groups if g.group_id == group for r in g.partitions if r.target_partition == q
            )
            assert position is not None
            outcome = measure(records[q], committed, position)
            assert outcome.skipped == 0
            assert row.rereads == outcome.reprocessed


def test_repartitioned_restore_edge_cases_resume_without_loss(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """The same edge cases as the identity restore (holes, marker, log end, 0, below and beyond the
    backup, no commit), with both source partitions spread over three target partitions."""
    topic = f"{unique_name}-orders"
    create_topic(target_cluster, topic, partitions=3)
    p0 = [Restored(i % 3, 0, o) for i, o in enumerate(P0)]
    p1 = [Restored((i + 1) % 3, 1, o) for i, o in enumerate(P1)]
    write_restored(
        target_cluster,
        topic,
        "orders",
        SOURCE,
        [
            (p0[:6] + p1[:5], True),
            ([Restored(0, 0, 999), Restored(1, 1, 999), Restored(2, 0, 998)], False),  # aborted: holes
            (p1[5:] + p0[6:], True),
        ],
        transactional_id=f"rp-{topic}",
    )
    records = {q: restored_records(target_cluster, topic, q, SOURCE) for q in range(3)}
    index = mapping_index(item for q in range(3) for item in ranges_from_records(records[q], topic, q))
    groups = prefixed(GROUPS, unique_name)
    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(),
            source=source_offsets(groups),
            topic_mapping={"orders": topic},
            mapping=index,
        )
    )
    rows = {(g.group_id, r.target_partition): r for g in plan.groups for r in g.partitions}
    assert {r.method for r in rows.values()} == {"mapping"}
    # Every target partition holds records of source partition 0, so the gap shows on each.
    assert {rows[(f"{unique_name}-beyond-backup", q)].recovery_gap for q in range(3)} == {8}
    assert all(rows[(f"{unique_name}-at-end", q)].recovery_gap == 0 for q in range(3))

    execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path / "snapshots")
    for group, offsets in groups.items():
        committed = {("orders", p): c for p, c in offsets.items()}
        for q in range(3):
            position = group_position(target_cluster, group, topic, q)
            assert position == reference_position(records[q], committed), (group, q)
            assert position is not None
            assert measure(records[q], committed, position).skipped == 0
    assert_groups_resume_without_loss(target_cluster, topic, groups, records, plan)


def test_execute_reports_offsets_read_back_that_differ_from_the_plan(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    # Between execute's apply and its read-back another client may commit; here the group's
    # real committed offsets on the broker differ from what is "wanted", as they would then.
    from kbackup.core.errors import VerificationError
    from kbackup.core.kafka import open_admin
    from kbackup.reset.executor import _verify

    topic, group = f"{unique_name}-t", f"{unique_name}-g"
    create_topic(target_cluster, topic, partitions=2)
    admin = open_admin(target_cluster.connection())
    admin.alter_offsets(group, {(topic, 0): 5, (topic, 1): 0})
    _verify(admin, {group: {(topic, 0): 5, (topic, 1): 0}})  # equal: no error
    with pytest.raises(VerificationError) as caught:
        _verify(admin, {group: {(topic, 0): 5, (topic, 1): 3}})
    assert f"group {group} on {topic}/1: committed 0, wanted 3" in str(caught.value)
    assert f"{topic}/0" not in str(caught.value)


def test_many_groups_are_planned_exactly_reading_each_partition_about_once(
    target_cluster: LocalKafkaCluster, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"{unique_name}-many"
    create_topic(target_cluster, topic, partitions=2)
    # 12,000 records per partition with holes on both sides: every 7th source offset is missing
    # (compaction), and every fifth transaction of 1,000 records is aborted (invisible on the target).
    kept = [offset for offset in range(14_000) if offset % 7 != 3][:12_000]
    batches = []
    for index, begin in enumerate(range(0, len(kept), 1_000)):
        chunk = kept[begin : begin + 1_000]
        batches.append(([Restored(p, p, o) for p in (0, 1) for o in chunk], True))
        if index % 5 == 2:
            batches.append(([Restored(p, p, 10**6 + begin) for p in (0, 1) for _ in range(50)], False))
    write_restored(target_cluster, topic, "orders", SOURCE, batches, transactional_id=f"restore-{topic}")
    chooser = random.Random(8)
    groups = {
        f"{unique_name}-g{index:03d}": {p: chooser.randrange(0, kept[-1] + 3) for p in (0, 1)}
        for index in range(150)
    }

    probes: list[Any] = []

    class CountingProbe(PartitionProbe):
        records_read = 0

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            probes.append(self)

        def _fetch(self, offset: int) -> Any:
            span = super()._fetch(offset)
            self.records_read += span.restored_records
            return span

    monkeypatch.setattr("kbackup.reset.planner.PartitionProbe", CountingProbe)
    with Progress(enabled=True) as progress:
        plan = plan_offset_reset(
            PlanRequest(
                target=target_cluster.connection(),
                source=source_offsets(groups),
                topic_mapping={"orders": topic},
            ),
            progress=progress,
        )
        # The long run shows its progress: one step per distinct search, then one per group.
        bars = {task.description: (task.completed, task.total) for task in progress.bars.tasks}
    searches = len({(p, offsets[p]) for offsets in groups.values() for p in (0, 1)})
    assert bars == {"searching target offsets": (searches, searches), "planning groups": (150, 150)}
    rows = {(g.group_id, r.target_partition): r for g in plan.groups for r in g.partitions}
    for partition in (0, 1):
        records = restored_records(target_cluster, topic, partition, SOURCE)
        assert len(records) == len(kept)
        for group, offsets in groups.items():
            committed = {("orders", partition): offsets[partition]}
            row = rows[(group, partition)]
            assert row.method == "binary-search"
            assert row.new_offset == reference_position(records, committed), (group, partition)
    # The searches run in committed-offset order and fill small gaps, so each partition is read
    # about once (150 groups searched in turn, each jumping to its own spot, read it several times).
    assert len(probes) == 2
    for probe in probes:
        assert probe.records_read <= 1.5 * len(kept), probe.records_read
