"""An identity restore of ``orders`` (two partitions, with holes) on a target, and a backup's source
offsets of it, for the reset tests.
"""

from __future__ import annotations

from kbackup.format.reset_plan import SourceOffsetsInfo
from kbackup.reset.sources import SourceOffsets
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import create_topic
from tests.support.restored_topics import Restored, write_restored

SOURCE = "prod-east"


# Source partition 0 holds offsets 5-9, 12, 15-20, 30 (holes: compaction and markers); the backup
# copied up to 32 (31 was a transaction marker). Partition 1 holds 0-9.
P0 = [5, 6, 7, 8, 9, 12, 15, 16, 17, 18, 19, 20, 30]


P1 = list(range(10))


def fill_identity_restore(cluster: LocalKafkaCluster, topic: str) -> None:
    create_topic(cluster, topic, partitions=2)
    p0 = [Restored(0, 0, o) for o in P0]
    p1 = [Restored(1, 1, o) for o in P1]
    write_restored(
        cluster,
        topic,
        "orders",
        SOURCE,
        [
            (p0[:4] + p1[:3], True),
            ([Restored(0, 0, 999), Restored(1, 1, 999)], False),  # an aborted batch: invisible, leaves holes
            (p0[4:9] + p1[3:8], True),
            (p0[9:] + p1[8:], True),
        ],
        transactional_id=f"restore-{topic}",
    )


def source_offsets(groups: dict[str, dict[int, int]], partitions: int = 2) -> SourceOffsets:
    return SourceOffsets(
        info=SourceOffsetsInfo(
            kind="backup", taken_at="2026-11-22T00:00:00Z", source_cluster=SOURCE, backup_id="b"
        ),
        groups={g: {("orders", p): c for p, c in offsets.items()} for g, offsets in groups.items()},
        partition_counts={"orders": partitions},
        backup_end={("orders", 0): 32, ("orders", 1): 10},
    )
