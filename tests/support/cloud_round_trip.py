"""A backup-and-restore round trip through one storage section, as a user's config file runs it:
a two-partition topic with a committed group on the source, and a config that backs it up to the
section and restores it under another name on the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, produce


def seeded_round_trip(
    source: LocalKafkaCluster,
    target: LocalKafkaCluster,
    topic: str,
    storage: dict[str, Any],
    config_path: Path,
    *,
    records: int,
    group_offset: int,
) -> Path:
    """``topic`` filled with ``records`` records over two partitions and a group at ``group_offset``
    of partition 0; the config file (backup id ``nightly``) restoring it as ``TOPIC-restored``."""
    create_topic(source, topic, partitions=2)
    produce(
        source, topic, [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(records)]
    )
    commit_group(source, f"{topic}-g", {(topic, 0): group_offset})
    return config_file(
        config_path,
        backup_id="nightly",
        source={"bootstrap_servers": [source.bootstrap_servers], "topics": {"include": [topic]}},
        target={"bootstrap_servers": [target.bootstrap_servers]},
        storage=storage,
        restore={"topic_mapping": {topic: f"{topic}-restored"}},
    )


def restored_equals_source(source: LocalKafkaCluster, target: LocalKafkaCluster, topic: str) -> bool:
    """Every record of ``topic`` is on the target's ``TOPIC-restored``, in its partition and order."""
    originals = consume_all(source, topic, [0, 1])
    copies = consume_all(target, f"{topic}-restored", [0, 1])
    return [(r.partition, r.key, r.value) for r in copies] == [
        (r.partition, r.key, r.value) for r in originals
    ]
