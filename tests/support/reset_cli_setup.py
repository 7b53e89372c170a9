"""A restored topic and a backup with two groups on it, for the offset-reset CLI tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kbackup.format.catalog import commit_manifest
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    GroupOffset,
    GroupSnapshot,
    Manifest,
    PartitionEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import LocalStorage
from tests.support.kafka_io import create_topic
from tests.support.restored_topics import Restored, write_restored

if TYPE_CHECKING:
    from kbackup.core.types import TopicPartitionKey

SOURCE = "cli-source"


def backup_with_groups(
    store: Path,
    source_cluster: str,
    topic: str,
    offsets: range,
    groups: dict[str, dict[TopicPartitionKey, int]],
    *,
    partitions: int = 1,
) -> None:
    """A backup "nightly" of ``topic``'s ``offsets`` in each of its ``partitions``, whose group
    snapshot holds ``groups``' committed offsets."""
    commit_manifest(
        LocalStorage(store),
        Manifest(
            backup_id="nightly", increment=0, run_id="r0", tool_version="test",
            started_at=utc_now_iso(), finished_at=utc_now_iso(), source=SourceInfo(cluster_id=source_cluster),
            topics=[TopicEntry(name=topic, partitions=partitions)],
            partitions=[PartitionEntry(topic=topic, partition=p, start_offset=offsets.start,
                                       end_offset=offsets.stop, log_start_offset=offsets.start,
                                       record_count=len(offsets))
                        for p in range(partitions)],
            consumer_groups=ConsumerGroupsSnapshot(
                taken_at=utc_now_iso(),
                groups=[
                    GroupSnapshot(group_id=g, offsets=[GroupOffset(topic=t, partition=p, offset=o)
                                                       for (t, p), o in at.items()])
                    for g, at in groups.items()
                ],
            ),
        ),
    )  # fmt: skip


@pytest.fixture
def setup(target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path) -> dict[str, object]:
    topic = f"{unique_name}-restored"
    create_topic(target_cluster, topic, partitions=1)
    write_restored(
        target_cluster, topic, "orders", SOURCE,
        [([Restored(0, 0, o) for o in range(100, 150)], True)], transactional_id=f"t-{topic}",
    )  # fmt: skip
    store = tmp_path / "store"
    groups = {f"{unique_name}-g1": 120, f"{unique_name}-g2": 150}
    backup_with_groups(
        store, SOURCE, "orders", range(100, 150), {g: {("orders", 0): c} for g, c in groups.items()}
    )
    config = tmp_path / "reset.yaml"
    config.write_text(
        f"backup_id: nightly\ntarget:\n  bootstrap_servers: {target_cluster.bootstrap_servers}\n"
        f"storage:\n  url: {store}\nrestore:\n  topic_mapping:\n    orders: {topic}\n"
        f"offset_reset:\n  snapshot_dir: {tmp_path / 'snapshots'}\n"
    )
    return {"topic": topic, "groups": groups, "config": config}
