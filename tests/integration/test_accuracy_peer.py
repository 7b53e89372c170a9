"""The accuracy benchmark's driver of the header-based peer (OSO kafka-backup), on real clusters.

Needs a peer binary, which is not part of this repository: set
``KBACKUP_PEER_BINARY`` to its path (see ``bench/accuracy/peer.py`` for the
version it was written against); without it the test is skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.accuracy.peer import peer_backup, peer_plan, peer_restore, peer_translate, peer_version
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, commit_group, create_topic, end_offsets, produce

#: Records per source partition.
COUNTS = {0: 40, 1: 25, 2: 30}
#: Records already on the target topic before the restore, so target offsets differ from source ones.
PREFILL = {0: 7, 1: 3, 2: 0}
#: Committed source offsets per group (a partition left out: the group has no offset there).
GROUPS = {
    "middle": {0: 10, 1: 20, 2: 1},
    "edges": {0: 0, 1: COUNTS[1], 2: COUNTS[2] - 1},
    "one-partition": {2: 15},
}

PEER_BINARY = os.environ.get("KBACKUP_PEER_BINARY", "")

# Decided at collection, so no cluster is started for a test that cannot run.
pytestmark = pytest.mark.skipif(
    not PEER_BINARY, reason="KBACKUP_PEER_BINARY is not set: no peer (OSO kafka-backup) binary to drive"
)


def peer_binary() -> Path:
    binary = Path(PEER_BINARY)
    if not binary.is_file():
        pytest.fail(f"KBACKUP_PEER_BINARY={PEER_BINARY} is not a file")
    return binary


def test_peer_backup_restore_translate_round_trip(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    binary = peer_binary()
    assert peer_version(binary).startswith("kafka-backup ")

    topic, restored_topic = f"{unique_name}-orders", f"{unique_name}-restored"
    partitions = sorted(COUNTS)
    create_topic(source_cluster, topic, partitions=len(partitions))
    produce(
        source_cluster,
        topic,
        [
            Record(key=f"k{p}-{i}".encode(), value=f"v{p}-{i}".encode(), partition=p)
            for p, count in COUNTS.items()
            for i in range(count)
        ],
    )
    groups = {f"{unique_name}-{name}": offsets for name, offsets in GROUPS.items()}
    for group, offsets in groups.items():
        commit_group(source_cluster, group, {(topic, p): o for p, o in offsets.items()})
    create_topic(target_cluster, restored_topic, partitions=len(partitions))
    produce(
        target_cluster,
        restored_topic,
        [Record(key=None, value=b"already here", partition=p) for p, n in PREFILL.items() for _ in range(n)],
    )

    storage, work = tmp_path / "storage", tmp_path / "work"
    backup = peer_backup(binary, source_cluster.bootstrap_servers, [topic], storage, work)
    assert backup.records == sum(COUNTS.values())
    assert backup.stored_bytes > 0
    assert backup.peak_rss_bytes > 0
    assert backup.seconds > 0

    restore = peer_restore(
        binary,
        target_cluster.bootstrap_servers,
        storage,
        work,
        {topic: restored_topic},
        write_offset_report=True,
    )
    assert restore.records == sum(COUNTS.values())
    assert restore.peak_rss_bytes > 0
    assert restore.reset_seconds is not None
    ends = end_offsets(target_cluster, restored_topic, partitions)
    assert ends == {p: PREFILL[p] + COUNTS[p] for p in partitions}

    expected = [(group, restored_topic, p) for group, offsets in groups.items() for p in offsets]
    positions = peer_translate(
        binary, target_cluster.bootstrap_servers, list(groups), work, storage_dir=storage, expected=expected
    )
    assert set(positions) == set(expected)
    for group, _, p in expected:
        position = positions[(group, restored_topic, p)]
        # Within the restored records' range on the target: from the first one to just past the last one.
        assert position is not None, (group, p)
        assert PREFILL[p] <= position <= ends[p], (group, p, position)
        # Plain (non-transactional) records: the peer maps source offset C to the C-th restored record.
        assert position == PREFILL[p] + groups[group][p], (group, p)
    # The peer's offline planner, on the offset report the restore saved, says the same.
    plan = peer_plan(binary, storage, list(groups), work)
    assert plan == positions
