"""Strategies besides the header-based binary search, and offsets read from the live source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, PreconditionError
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot
from kbackup.reset.executor import execute_plan
from kbackup.reset.planner import PlanRequest, mapping_index, plan_offset_reset
from kbackup.reset.settings import Strategy
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import DEFAULT_TIMESTAMP, BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.identity_restore import SOURCE, fill_identity_restore, source_offsets
from tests.support.kafka_io import Record, create_topic, end_offsets, group_position, produce
from tests.support.oracles import ranges_from_records, reference_position
from tests.support.restored_topics import Restored, restored_records, write_restored


def test_earliest_latest_and_fixed_offset(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    fill_identity_restore(target_cluster, topic)
    ends = end_offsets(target_cluster, topic, [0, 1])
    expected: dict[Strategy, dict[int, int]] = {
        "earliest": {0: 0, 1: 0},
        "latest": ends,
        "offset": {0: 3, 1: 3},
    }
    for strategy, positions in expected.items():
        group = f"{unique_name}-{strategy}"
        plan = plan_offset_reset(
            PlanRequest(
                target=target_cluster.connection(),
                source=source_offsets({group: {0: 12, 1: 4}}),
                strategy=strategy,
                topic_mapping={"orders": topic},
                fixed_offset=3 if strategy == "offset" else None,
            )
        )
        rows = plan.groups[0].partitions
        assert {row.method for row in rows} == {strategy}
        # Not exact: the plan says the re-reads are unknown rather than claiming 0.
        assert all(row.rereads is None for row in rows)
        execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
        assert {p: group_position(target_cluster, group, topic, p) for p in (0, 1)} == positions, strategy


def test_from_mapping_strategy_uses_the_mapping_even_without_repartitioning(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    fill_identity_restore(target_cluster, topic)
    records = {p: restored_records(target_cluster, topic, p, SOURCE) for p in (0, 1)}
    index = mapping_index(item for p in (0, 1) for item in ranges_from_records(records[p], topic, p))
    group = f"{unique_name}-mapped"
    committed = {0: 13, 1: 6}
    request = PlanRequest(
        target=target_cluster.connection(),
        source=source_offsets({group: committed}),
        strategy="from-mapping",
        topic_mapping={"orders": topic},
    )
    with pytest.raises(ConfigError, match="mapping_file"):
        plan_offset_reset(request)
    request.mapping = index
    plan = plan_offset_reset(request)
    assert {row.method for row in plan.groups[0].partitions} == {"mapping"}
    execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
    for p in (0, 1):
        position = group_position(target_cluster, group, topic, p)
        assert position == reference_position(records[p], {("orders", p): committed[p]})


def test_timestamp_strategy_for_data_restored_without_headers(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Timestamps of the committed records come from the backup's segments; the target is searched
    with offsets-for-times. Through the config file and the CLI, as a user runs it."""
    timestamps = {offset: DEFAULT_TIMESTAMP + 10 * (offset - 100) for offset in range(100, 140)}
    store = tmp_path / "store"
    builder = BackupBuilder(LocalStorage(store), "nightly", source_cluster=SOURCE, scratch_dir=tmp_path)
    builder.topic("events", 1).partition(
        "events", 0, [BackupRecord(offset=o, value=b"e", timestamp=t) for o, t in timestamps.items()]
    )
    groups = {f"{unique_name}-mid": 115, f"{unique_name}-done": 140}
    builder.commit(
        ConsumerGroupsSnapshot(
            taken_at="2026-11-22T00:00:00Z",
            groups=[
                GroupSnapshot(group_id=g, offsets=[GroupOffset(topic="events", partition=0, offset=c)])
                for g, c in groups.items()
            ],
        )
    )
    topic = f"{unique_name}-events"
    create_topic(target_cluster, topic, partitions=1)
    # Restored without origin headers, timestamps kept: target offset = source offset - 100.
    produce(target_cluster, topic, [Record(key=None, value=b"e", timestamp=t) for t in timestamps.values()])
    config = tmp_path / "reset.yaml"
    config.write_text(
        f"backup_id: nightly\ntarget:\n  bootstrap_servers: {target_cluster.bootstrap_servers}\n"
        f"storage:\n  url: {store}\nrestore:\n  topic_mapping:\n    events: {topic}\n"
        f"offset_reset:\n  strategy: timestamp\n  snapshot_dir: {tmp_path / 'snapshots'}\n"
    )
    plan_file = tmp_path / "plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    plan = json.loads(plan_file.read_text())
    rows = {g["group_id"]: g["partitions"][0] for g in plan["groups"]}
    assert {row["method"] for row in rows.values()} == {"timestamp"}
    assert {g: row["new_offset"] for g, row in rows.items()} == {
        f"{unique_name}-mid": 15,  # the record committed on the source (offset 115) is at target 15
        f"{unique_name}-done": 40,  # everything processed: the end of the partition
    }
    capsys.readouterr()
    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config)]) == 0
    assert group_position(target_cluster, f"{unique_name}-mid", topic, 0) == 15
    assert group_position(target_cluster, f"{unique_name}-done", topic, 0) == 40

    # offset_reset.timestamp: one point in time for every group instead of each committed record's.
    point_in_time = timestamps[125]
    config.write_text(config.read_text() + f"  timestamp: {point_in_time}\n")
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    plan = json.loads(plan_file.read_text())
    assert {g["group_id"]: g["partitions"][0]["new_offset"] for g in plan["groups"]} == {
        f"{unique_name}-mid": 25,
        f"{unique_name}-done": 25,
    }
    # offset_reset.timeout_secs bounds planning: exit 6, no plan written.
    plan_file.unlink()
    config.write_text(config.read_text() + "  timeout_secs: 0.000001\n")
    capsys.readouterr()
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 6
    assert "offset_reset.timeout_secs" in capsys.readouterr().err
    assert not plan_file.exists()


def test_offsets_from_the_live_source_cluster(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
) -> None:
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=None, value=b"s") for _ in range(50)])
    group = f"{unique_name}-app"
    committer = Consumer({"bootstrap.servers": source_cluster.bootstrap_servers, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
    committer.close()
    create_topic(target_cluster, topic, partitions=1)
    # The restore put source offsets 10..49 at target offsets 0..39 (the backup started at 10).
    write_restored(
        target_cluster, topic, topic, "live-origin", [([Restored(0, 0, o) for o in range(10, 50)], True)],
        transactional_id=f"live-{topic}",
    )  # fmt: skip
    config = tmp_path / "reset.yaml"
    # The origin is a label and there is no backup to say which Kafka cluster it is: named explicitly.
    config.write_text(
        f"source:\n  bootstrap_servers: {source_cluster.bootstrap_servers}\n"
        f"target:\n  bootstrap_servers: {target_cluster.bootstrap_servers}\n"
        f"offset_reset:\n  source_offsets: live\n  source_cluster: live-origin\n  groups: [{group}]\n"
        f"  live_source_cluster_id: {source_cluster.cluster_id}\n"
        f"  snapshot_dir: {tmp_path / 'snapshots'}\n"
    )
    plan_file = tmp_path / "plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    plan = json.loads(plan_file.read_text())
    assert plan["source"]["kind"] == "live"
    assert plan["source"]["bootstrap_servers"] == [source_cluster.bootstrap_servers]
    assert plan["source"]["taken_at"]
    row = plan["groups"][0]["partitions"][0]
    assert (row["source_committed"], row["new_offset"], row["method"]) == ({"0": 20}, 10, "binary-search")
    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config)]) == 0
    assert group_position(target_cluster, group, topic, 0) == 10


def test_header_search_stops_when_a_partition_holds_other_source_partitions(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    """Same partition count, but the restore mixed source partitions: the binary search is not valid."""
    topic = f"{unique_name}-orders"
    create_topic(target_cluster, topic, partitions=2)
    mixed = [Restored(0, i % 2, 100 + i) for i in range(20)] + [Restored(1, 1, 200 + i) for i in range(5)]
    write_restored(target_cluster, topic, "orders", SOURCE, [(mixed, True)], transactional_id=f"x-{topic}")
    with pytest.raises(PreconditionError, match=f"{topic}/0 holds records of other source partitions"):
        plan_offset_reset(
            PlanRequest(
                target=target_cluster.connection(),
                source=source_offsets({f"{unique_name}-g": {0: 105, 1: 110}}),
                topic_mapping={"orders": topic},
            )
        )
