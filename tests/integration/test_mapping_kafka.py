"""What the mapping does on the target cluster before Spark: topics, offsets, errors."""

from __future__ import annotations

import pytest

from kbackup.core.errors import NotFoundError
from kbackup.format.mapping_file import ScannedPartition
from kbackup.mapping import build, build_offset_mapping, plan_scan
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support import mapping_restores
from tests.support.kafka_io import create_topic


def test_unknown_topic_is_not_found(target_cluster: LocalKafkaCluster, unique_name: str) -> None:
    create_topic(target_cluster, unique_name)
    with pytest.raises(
        NotFoundError, match=f"{unique_name}-absent not found on {target_cluster.bootstrap_servers}"
    ):
        build_offset_mapping(
            target_cluster.connection(), source_cluster="c", topics=[unique_name, f"{unique_name}-absent"]
        )


def test_plan_reads_committed_end_offsets_of_every_partition(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    made = mapping_restores.transactions(target_cluster, unique_name, "prod")
    made.update(mapping_restores.empty_and_foreign_only(target_cluster, unique_name))
    plan = plan_scan(target_cluster.connection(), sorted(made))
    assert plan.target_cluster_id == target_cluster.cluster_id
    # 3 committed transactions and 1 aborted: 14 records and 4 markers; the end is after the last marker.
    assert ScannedPartition(f"{unique_name}-payments", 0, 0, 18) in plan.partitions
    assert ScannedPartition(f"{unique_name}-empty", 1, 0, 0) in plan.partitions
    assert ScannedPartition(f"{unique_name}-foreign", 0, 0, 5) in plan.partitions
    everything = plan_scan(target_cluster.connection(), all_topics=True)
    assert {item.topic for item in plan.partitions} <= {item.topic for item in everything.partitions}
    assert not any(item.topic.startswith("__") for item in everything.partitions)


def test_empty_topics_give_an_empty_mapping_without_starting_spark(
    target_cluster: LocalKafkaCluster, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*_args: object) -> None:
        raise AssertionError("Spark was started for topics without records")

    monkeypatch.setattr(build, "_run_job", no_spark)
    made = mapping_restores.empty_and_foreign_only(target_cluster, unique_name)
    mapping = build_offset_mapping(
        target_cluster.connection(), source_cluster="c", topics=[f"{unique_name}-empty"]
    )
    assert mapping.ranges == []
    assert [(s.topic, s.partition, s.end_offset) for s in mapping.scanned] == [
        (f"{unique_name}-empty", p, 0) for p in range(made[f"{unique_name}-empty"])
    ]
