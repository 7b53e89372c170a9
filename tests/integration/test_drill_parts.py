"""The drill: its data generator, its verifier, and the command, on the real clusters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

import kbackup
from kbackup.app.drill_data import _wait_for_compaction, fill_source
from kbackup.app.drill_proof import verify_positions
from kbackup.cli.main import run
from kbackup.format.reset_plan import SourceOffsetsInfo
from kbackup.reset.executor import execute_plan
from kbackup.reset.planner import PlanRequest, plan_offset_reset
from kbackup.reset.sources import SourceOffsets
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.config_files import config_file
from tests.support.kafka_io import (
    Record,
    commit_group,
    consume_all,
    create_topic,
    end_offsets,
    group_position,
    produce,
)
from tests.support.oracles import reference_position
from tests.support.restored_topics import Restored, restored_records, write_restored


def test_fill_source_writes_the_hard_cases(source_cluster: LocalKafkaCluster, unique_name: str) -> None:
    prefix = f"{unique_name}-"
    data = fill_source(source_cluster.connection(), records_per_partition=200, prefix=prefix)
    assert data.topics == {
        f"{prefix}orders": 3,
        f"{prefix}clicks": 2,
        f"{prefix}customers": 1,
        f"{prefix}payments": 2,
    }
    payments = consume_all(source_cluster, f"{prefix}payments", [0, 1])
    visible = {(r.partition, r.offset) for r in payments}
    # Committed on holes: transaction markers or aborted records are not visible records.
    for (topic, partition), offset in data.groups[f"{prefix}payouts"].items():
        assert topic == f"{prefix}payments"
        assert (partition, offset) not in visible
    # The caught-up group sits at the end of every partition it reads.
    ends = end_offsets(source_cluster, f"{prefix}orders", [0, 1, 2])
    assert all(data.groups[f"{prefix}analytics"][(f"{prefix}orders", p)] == ends[p] for p in range(3))
    # Some partitions were never committed by the audit group.
    assert (f"{prefix}clicks", 1) not in data.groups[f"{prefix}audit"]
    customers = consume_all(source_cluster, f"{prefix}customers", [0])
    assert any(r.value is None for r in customers)  # tombstones are kept
    assert len(data.groups[f"{prefix}payouts"]) == 2
    # The log cleaner compacted the customers topic before the groups committed, and the crm group
    # committed inside one of its holes.
    assert data.compaction_holes
    kept = {record.consumed_offset for record in customers}
    crm = data.groups[f"{prefix}crm"][(f"{prefix}customers", 0)]
    assert crm not in kept
    assert crm < max(kept)


def test_without_compaction_in_time_the_data_set_says_so(
    source_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    """The wait for the log cleaner is bounded and reports whether holes appeared (a topic without
    cleanup.policy compact never gets any), so a drill on such data is marked instead of pretending."""
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v%d" % i) for i in range(20)])
    assert _wait_for_compaction(source_cluster.connection(), unique_name, timeout=2.0) is False


def test_a_drill_that_proves_nothing_fails(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No consumer group on the backed-up topic: nothing is moved or judged, so the drill fails (exit
    11) saying why, instead of 'PASSED: 0 group(s)'."""
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v%d" % i) for i in range(10)])
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="nothing",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [unique_name]},
        },
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(tmp_path / "store")},
        three_phase={"build_mapping": "when-needed"},
    )
    report = tmp_path / "report.json"
    code = run(["drill", "-c", str(config), "--report", str(report)])
    err = capsys.readouterr().err
    assert code == 11, err
    assert "the drill proved nothing: no consumer group had committed offsets" in err
    document = json.loads(report.read_text())
    assert document["passed"] is False
    assert document["unproven"].startswith("no consumer group")
    assert "nothing was proven" in report.with_suffix(".html").read_text()


def test_verify_catches_a_skip_and_counts_rereads(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-t"
    create_topic(target_cluster, topic, partitions=1)
    write_restored(
        target_cluster,
        topic,
        "orders",
        "src",
        [([Restored(0, 0, o) for o in range(10, 30)], True)],
        f"tx-{topic}",
    )
    exact, behind, ahead = (f"{unique_name}-{name}" for name in ("exact", "behind", "ahead"))
    committed = {exact: 15, behind: 15, ahead: 15}
    source = SourceOffsets(
        info=SourceOffsetsInfo(kind="live", taken_at="now", source_cluster="src"),
        groups={exact: {("orders", 0): 15}},
        partition_counts={"orders": 1},
    )
    plan = plan_offset_reset(
        PlanRequest(target=target_cluster.connection(), source=source, topic_mapping={"orders": topic})
    )
    execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)

    for group, offset in ((behind, 2), (ahead, 9)):
        consumer = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        consumer.close()
    result = verify_positions(
        target_cluster.connection(),
        source_cluster="src",
        groups={group: {("orders", 0): c} for group, c in committed.items()},
        target_partitions_of={group: [(topic, 0)] for group in committed},
    )
    totals = result.per_group()
    assert totals[exact] == {"skipped": 0, "reprocessed": 0, "partitions": 1}
    assert totals[behind] == {"skipped": 0, "reprocessed": 3, "partitions": 1}  # origins 12, 13, 14 again
    assert totals[ahead] == {"skipped": 4, "reprocessed": 0, "partitions": 1}  # origins 15-18 lost
    # The partition's 20 restored records were read once and compared with each group's position.
    assert (result.records_read_back, result.records_compared) == (20, 60)


def test_drill_moves_its_groups_on_the_drill_topics_whatever_offset_reset_topic_mapping_says(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``offset_reset.topic_mapping`` names the topics of a real recovery; the drill restores under its
    prefix and must move (and prove) its group copies there, not on the recovery's topics."""
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i, partition=i % 2) for i in range(60)])
    group = f"{unique_name}-app"
    commit_group(source_cluster, group, {(topic, 0): 12, (topic, 1): 30})  # partition 1: all read
    marker = f"LEAKME-{unique_name}"
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="drill",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        target={
            "bootstrap_servers": [target_cluster.bootstrap_servers],
            # Any properties value may be a secret: the report must not carry it.
            "properties": {"client.id": marker},
        },
        storage={"url": str(tmp_path / "store")},
        three_phase={"build_mapping": "when-needed"},
        offset_reset={"groups": [group], "topic_mapping": {topic: f"{topic}-recovered"}},
    )
    report = tmp_path / "report.json"
    code = run(["drill", "-c", str(config), "--report", str(report)])
    assert code == 0, capsys.readouterr().err
    document = json.loads(report.read_text())
    assert document["passed"] is True
    # The report names both clusters by their ids, and when the drill ran.
    assert document["clusters"]["source"]["kafka_cluster_id"] == source_cluster.cluster_id
    assert document["clusters"]["target"]["kafka_cluster_id"] == target_cluster.cluster_id
    assert document["seconds"] > 0
    page = report.with_suffix(".html").read_text()
    for fact in (source_cluster.cluster_id, target_cluster.cluster_id, document["started_at"], "PASSED"):
        assert fact in page, fact
    # What an auditor files: the version and the configuration's digest, the records the proof read
    # back (60 restored, one group), the phases after the groups were committed; no secret.
    assert document["kafka_backup_version"] == kbackup.__version__
    digest = document["config_digest"]["sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert (document["records_read_back"], document["records_compared"]) == (60, 60)
    parts = {phase["name"]: phase["part"] for phase in document["phases"]}
    assert (parts["backup"], parts["restore"], parts["reset"]) == ("before recovery", "recovery", "recovery")
    assert (parts["verify"], parts["proof"]) == ("after recovery", "after recovery")
    assert 0 < document["recovery_seconds"] < document["seconds"]
    for fact in (
        f"kafka-backup {kbackup.__version__}",
        digest,
        "60 restored records read back",
        "proof (after",
    ):
        assert fact in page, fact
    assert marker not in page
    assert marker not in report.read_text()
    assert "proof: 60 restored record(s) read back" in capsys.readouterr().out
    drill_topic = f"drill.{topic}"
    committed = {(topic, 0): 12, (topic, 1): 30}
    for p in (0, 1):
        records = restored_records(target_cluster, drill_topic, p, source_cluster.cluster_id)
        expected = reference_position(records, {(topic, p): committed[(topic, p)]})
        assert group_position(target_cluster, f"drill.{group}", drill_topic, p) == expected, p
