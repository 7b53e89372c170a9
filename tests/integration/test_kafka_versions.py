"""The compatibility set (docs/compatibility.md): a backup of a Kafka 3.9 cluster and one of the newest 4.x,
each three-phase restored into the newest 4.x.

The clusters are single-node KRaft clusters started once for this module: a 3.9 source, and a newest
4.x source and target (the session's clusters when the newest 4.x is the default version). Each source gets
a plain topic with headers over two partitions, a compacted topic, and a topic written in
transactions with one aborted, and classic groups with committed offsets (on 4.x also a KIP-848
group). The oracle is the values, headers and timestamps the test produced, and the reference
position of every group computed from the records on both clusters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType

from kbackup.sandbox.jars import KAFKA_3_VERSION, KAFKA_NEWEST_VERSION, KAFKA_VERSION, kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.three_phase_runs import run_cli
from tests.support.version_compat import (
    MOVED,
    check_records,
    check_resumes,
    clusters_of_versions,
    commit_classic_groups,
    commit_consumer_protocol_group,
    expected_positions,
    fill_source,
    group_type,
    moved_positions,
    write_compat_config,
)


@pytest.fixture(scope="module")
def versions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LocalKafkaCluster]]:
    """``kafka-3`` (the last 3.x line), ``newest-source`` and ``newest-target`` (the newest 4.x)."""
    wanted = {"kafka-3": KAFKA_3_VERSION}
    if KAFKA_NEWEST_VERSION != KAFKA_VERSION:
        wanted |= {"newest-source": KAFKA_NEWEST_VERSION, "newest-target": KAFKA_NEWEST_VERSION}
    with clusters_of_versions(wanted, tmp_path_factory.mktemp("versions")) as started:
        clusters = dict(started)  # the session's clusters added here stay up after this module
        if KAFKA_NEWEST_VERSION == KAFKA_VERSION:
            clusters["newest-source"] = request.getfixturevalue("source_cluster")
            clusters["newest-target"] = request.getfixturevalue("target_cluster")
        yield clusters


@pytest.mark.parametrize(
    ("source_name", "consumer_protocol_group"),
    [
        # KIP-848 groups are off by default in 3.9 (early access); on by default from 4.0.
        pytest.param("kafka-3", False, id=f"from-{KAFKA_3_VERSION}"),
        pytest.param("newest-source", True, id=f"from-{KAFKA_NEWEST_VERSION}"),
    ],
)
def test_a_backup_of_each_version_is_restored_exactly_into_the_newest(
    versions: dict[str, LocalKafkaCluster],
    unique_name: str,
    tmp_path: Path,
    source_name: str,
    consumer_protocol_group: bool,
) -> None:
    source, target_cluster = versions[source_name], versions["newest-target"]
    assert target_cluster.libs == kafka_libs(KAFKA_NEWEST_VERSION)
    data = fill_source(source, unique_name)
    commit_classic_groups(source, data, unique_name)
    if consumer_protocol_group:
        commit_consumer_protocol_group(source, data, f"{unique_name}-stream")
        assert group_type(source, f"{unique_name}-stream") == ConsumerGroupType.CONSUMER
    store = tmp_path / "store"
    take_backup(source, store, "nightly", [topic.name for topic in data.topics.values()])

    finished = run_cli(write_compat_config(tmp_path / "restore.yaml", target_cluster, store, data))
    assert finished.returncode == 0, finished.stderr[-3000:]
    summary = json.loads(finished.stdout)
    assert summary["phases"]["reset"]["records_reread"] == 0

    check_records(target_cluster, data)
    expected = expected_positions(source, target_cluster, data)
    assert moved_positions(target_cluster, expected) == expected
    # A KIP-848 consumer resumes a moved group where the reference says: the reset commits the offsets
    # of an empty classic group (whatever the source group's type), the first consumer-protocol
    # member turns it into a consumer group, offsets kept.
    resumed = [(f"{unique_name}-audit", data.topics["changelog"])]
    if consumer_protocol_group:
        resumed.append((f"{unique_name}-stream", data.topics["orders"]))
    for group, topic in resumed:
        assert group_type(target_cluster, MOVED + group) == ConsumerGroupType.CLASSIC
        check_resumes(target_cluster, data, group, topic, expected)
        assert group_type(target_cluster, MOVED + group) == ConsumerGroupType.CONSUMER
