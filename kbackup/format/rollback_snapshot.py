"""The rollback snapshot: the offsets ``offset-reset execute`` replaced, written before it changes them.

``offset-rollback`` reads it back to put every group where it was. A versioned JSON document
(``format: kafka-backup-offset-snapshot``) in the snapshot folder, one file per execute, named
after its ``snapshot_id``; it holds group ids, topics and offsets, never a secret.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from kbackup.core.errors import ConfigError, NotFoundError

SNAPSHOT_FORMAT = "kafka-backup-offset-snapshot"


class SnapshotModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SnapshotOffset(SnapshotModel):
    topic: str
    partition: int
    offset: int


class GroupSnapshotEntry(SnapshotModel):
    group_id: str
    #: Every committed offset of the group before execute (all topics), for an exact rollback.
    offsets: list[SnapshotOffset]
    #: The partitions execute changed.
    changed: list[SnapshotOffset]


class OffsetSnapshot(SnapshotModel):
    format: str = SNAPSHOT_FORMAT
    format_version: int = 1
    snapshot_id: str
    created_at: str
    target_cluster_id: str | None
    bootstrap_servers: list[str]
    plan_created_at: str
    groups: list[GroupSnapshotEntry]


def write_snapshot(snapshot: OffsetSnapshot, snapshot_dir: Path) -> Path:
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    path = snapshot_dir / f"{snapshot.snapshot_id}.json"
    path.write_text(json.dumps(snapshot.model_dump(mode="json"), indent=2) + "\n")
    return path


def list_snapshots(snapshot_dir: Path) -> list[OffsetSnapshot]:
    if not snapshot_dir.is_dir():
        return []
    return sorted(
        (read_snapshot(path) for path in snapshot_dir.glob("*.json")), key=lambda item: item.created_at
    )


def read_snapshot(path: Path) -> OffsetSnapshot:
    try:
        return OffsetSnapshot.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFoundError(f"rollback snapshot {path} not found") from None
    except (OSError, ValidationError) as exc:
        raise ConfigError(f"rollback snapshot {path} is not readable: {str(exc).splitlines()[0]}") from None
