"""Config files the tests write: YAML from sections, and the backup and three-phase configs several
tests share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kbackup.sandbox.kafka import LocalKafkaCluster


def write_backup_config(
    path: Path, cluster: LocalKafkaCluster, topic: str, store: Path, **backup: Any
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "mode": "backup",
                "backup_id": "follow",
                "source": {"bootstrap_servers": [cluster.bootstrap_servers], "topics": {"include": [topic]}},
                "storage": {"url": str(store)},
                "backup": backup,
            }
        )
    )
    return path


def write_three_phase_config(
    path: Path, target: LocalKafkaCluster, store: Path, topic: str, build_mapping: str
) -> Path:
    path.write_text(
        f"backup_id: nightly\n"
        f"target:\n  bootstrap_servers: {target.bootstrap_servers}\n"
        f"storage:\n  url: {store}\n"
        f"restore:\n  topic_mapping:\n    {topic}: {topic}-restored\n  transaction_max_records: 25\n"
        f"offset_reset:\n  snapshot_dir: {path.parent / 'snapshots'}\n"
        f"three_phase:\n  state_dir: {path.parent / 'state'}\n  build_mapping: {build_mapping}\n"
        f"  group_prefix: moved-\n"
    )
    return path
