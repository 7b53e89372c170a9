"""A backup of a three-node source while its nodes fail: the leader of a partition being read
killed mid-copy, and a rolling restart of all three nodes under ``backup --follow``.

One three-node cluster for the module: each test brings every node back before the next. The
oracle is what the test itself wrote (every record once, in order per partition, with its key,
value, headers and timestamp), read back from the backup through the format's reader.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster, SandboxError, local_clusters
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup
from tests.support.cli_process import start_cli, wait_for
from tests.support.cluster_nodes import create_replicated_topic, start_stopped_nodes
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, produce
from tests.support.node_faults import (
    ONE_BATCH_PER_FETCH,
    AckedProducer,
    rolling_restart,
    throttle_reads,
    wait_in_sync_everywhere,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 6_000
NOW = int(time.time() * 1000)
#: The client id of the backup's consumer (kbackup/backup/runner.py), which a quota throttles.
BACKUP_CLIENT_ID = "kafka-backup"
READ_BYTES_PER_SEC = 12_000


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    with local_clusters(["backup-faults"], tmp_path_factory.mktemp("kafka-nodes"), nodes=3) as (cluster,):
        yield cluster


@pytest.fixture(autouse=True)
def every_node_back(three_nodes: LocalKafkaCluster) -> Iterator[None]:
    yield
    start_stopped_nodes(three_nodes)


def written(count: int) -> list[Record]:
    """Records with keys, values, headers on some and timestamps of their own, round-robin."""
    return [
        Record(
            key=b"k%d" % i,
            value=b"v%d-" % i + b"x" * 40,
            headers=(("n", b"%d" % i),) if i % 3 == 0 else (),
            timestamp=NOW - 600_000 + i,
            partition=i % PARTITIONS,
        )
        for i in range(count)
    ]


def assert_backed_up_once_in_order(store: Path, backup_id: str, expected: dict[int, list[Record]]) -> None:
    """The backup's records of each partition are exactly ``expected``'s, in order, at offsets that
    only grow: none lost, none doubled, none moved."""
    found: dict[int, list[Record]] = {p: [] for p in expected}
    for record in read_backup(store, backup_id):
        found[record.partition or 0].append(record)
    for partition, records in expected.items():
        backed_up = found[partition]
        offsets = [r.consumed_offset for r in backed_up]
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets doubled or out of order"
        payload = [(r.key, r.value, r.headers, r.timestamp) for r in backed_up]
        want = [(r.key, r.value, r.headers, r.timestamp) for r in records]
        assert len(payload) == len(want), (
            f"partition {partition}: {len(payload)} backed up, {len(want)} written"
        )
        assert payload == want, f"partition {partition}: records differ from those written"


def validate_deep(store: Path, backup_id: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kbackup", "validate", "-p", str(store), "--backup-id", backup_id, "--deep"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"validate --deep: exit {result.returncode}: {result.stdout}{result.stderr}"
    )


def leader_elsewhere(cluster: LocalKafkaCluster, topic: str, partition: int, killed: int) -> bool:
    try:
        return cluster.partition_leader(topic, partition) != killed
    except SandboxError:  # no leader during the election
        return False


def test_leader_of_a_partition_being_read_killed_mid_backup(
    three_nodes: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    create_replicated_topic(three_nodes, topic, partitions=PARTITIONS)
    records = written(RECORDS)
    # Many small batches, read one per fetch.
    produce(three_nodes, topic, records, acks="all", **{"linger.ms": 0, "batch.num.messages": 20})
    store = tmp_path / "store"
    config = config_file(
        tmp_path / "backup.yaml",
        backup_id="leader-killed",
        source={
            "bootstrap_servers": [three_nodes.bootstrap_servers],
            "topics": {"include": [topic]},
            "properties": ONE_BATCH_PER_FETCH,
        },
        storage={"url": str(store)},
        backup={"segment_max_records": 500, "stall_timeout_secs": 60},
    )
    killed = three_nodes.partition_leader(topic, 0)
    # Kafka's quota on the backup's client id: about 12 s per partition, on any machine.
    throttle_reads(three_nodes, BACKUP_CLIENT_ID, READ_BYTES_PER_SEC)
    process = start_cli("backup", "-c", str(config), "--json")
    try:
        data = store / "leader-killed" / "data"
        wait_for(lambda: data.exists() and any(data.rglob("*.parquet")), "the first segment", process=process)
        three_nodes.kill_node(killed)
        assert process.poll() is None, "the backup ended before the leader was killed: nothing was tested"
        # Segments close every 500 records: fewer than all of partition 0's mean some were still unread.
        uploaded = len(list((data / topic / "0").glob("*.parquet")))
        assert uploaded < RECORDS // PARTITIONS // 500, "partition 0 was copied before its leader died"
        wait_for(lambda: leader_elsewhere(three_nodes, topic, 0, killed), "leadership to move", 30, process)
        three_nodes.start_node(killed)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        throttle_reads(three_nodes, BACKUP_CLIENT_ID, None)
    assert process.returncode == 0, f"the backup did not ride out the leader's death: {stderr}"
    assert json.loads(stdout)["records"] == RECORDS
    expected = {p: [r for r in records if r.partition == p] for p in range(PARTITIONS)}
    assert_backed_up_once_in_order(store, "leader-killed", expected)
    validate_deep(store, "leader-killed")


def covered_up_to(store: Path, backup_id: str, topic: str) -> dict[int, int]:
    catalog = BackupCatalog(open_storage(str(store)))
    if not catalog.exists(backup_id):
        return {}
    return {p: item.end_offset for (t, p), item in catalog.load(backup_id).coverage().items() if t == topic}


def test_rolling_restart_of_every_node_during_backup_follow(
    three_nodes: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    group = f"{unique_name}-group"
    create_replicated_topic(three_nodes, topic, partitions=PARTITIONS)
    store = tmp_path / "store"
    config = config_file(
        tmp_path / "follow.yaml",
        backup_id="rolling",
        source={"bootstrap_servers": [three_nodes.bootstrap_servers], "topics": {"include": [topic]}},
        storage={"url": str(store)},
        backup={"checkpoint_interval_secs": 1, "stall_timeout_secs": 120},
    )
    producer = AckedProducer(three_nodes, topic, PARTITIONS).start()
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    try:
        wait_for(lambda: covered_up_to(store, "rolling", topic) != {}, "the first increment", process=process)
        rolling_restart(three_nodes, [topic], process)
        commit_group(three_nodes, group, {(topic, 0): 7, (topic, 2): 3})
        acknowledged = producer.stop()
        ends = {p: max(r.consumed_offset for r in rs) + 1 for p, rs in producer.by_partition().items()}
        wait_for(
            lambda: covered_up_to(store, "rolling", topic) == ends, f"an increment up to {ends}", 60, process
        )
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if producer.running:
            producer.stop()
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert process.returncode == 0, f"the follow did not stop cleanly on SIGTERM: {stderr}"
    assert json.loads(stdout)["mode"] == "follow"
    assert producer.errors == [], f"Kafka refused writes during the rolling restart: {producer.errors}"
    assert len(acknowledged) > 0
    assert_backed_up_once_in_order(store, "rolling", producer.by_partition())
    snapshot = BackupCatalog(open_storage(str(store))).load("rolling").consumer_groups
    assert snapshot is not None
    committed = next(g for g in snapshot.groups if g.group_id == group)
    assert {(o.topic, o.partition, o.offset) for o in committed.offsets} == {(topic, 0, 7), (topic, 2, 3)}
    wait_in_sync_everywhere(three_nodes, [topic])
