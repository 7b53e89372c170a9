"""Config files the tests write: YAML from sections (``config_file``), and the backup and three-phase
configs several tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kbackup.sandbox.kafka import LocalKafkaCluster


def config_file(path: Path, /, **sections: Any) -> Path:
    """Write a YAML config file of ``sections`` (``backup_id``, ``source``, ``storage``, ...) at
    ``path``, laid out as yaml.safe_dump lays it out; returns ``path``."""
    path.write_text(yaml.safe_dump(sections))
    return path


def write_backup_config(
    path: Path, cluster: LocalKafkaCluster, topic: str, store: Path, **backup: Any
) -> Path:
    return config_file(
        path,
        mode="backup",
        backup_id="follow",
        source={"bootstrap_servers": [cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage={"url": str(store)},
        backup=backup,
    )


def write_three_phase_config(
    path: Path, target: LocalKafkaCluster, store: Path, topic: str, build_mapping: str
) -> Path:
    return config_file(
        path,
        backup_id="nightly",
        target={"bootstrap_servers": target.bootstrap_servers},
        storage={"url": str(store)},
        restore={"topic_mapping": {topic: f"{topic}-restored"}, "transaction_max_records": 25},
        offset_reset={"snapshot_dir": str(path.parent / "snapshots")},
        three_phase={
            "state_dir": str(path.parent / "state"),
            "build_mapping": build_mapping,
            "group_prefix": "moved-",
        },
    )
