"""The rollback snapshot: the offsets ``offset-reset execute`` replaced, written before it changes them.

``offset-rollback`` reads it back to put every group where it was. A versioned JSON document
(``format: kafka-backup-offset-snapshot``) in the snapshot folder, one file per execute, named
after its ``snapshot_id``; it holds group ids, topics and offsets, never a secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kbackup.core.config import KAFKA_INT32_MAX, KAFKA_INT64_MAX
from kbackup.core.errors import ConfigError, NotFoundError
from kbackup.format.documents import parse_json, validate

SNAPSHOT_FORMAT = "kafka-backup-offset-snapshot"


class SnapshotModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SnapshotOffset(SnapshotModel):
    topic: str
    partition: Annotated[int, Field(ge=0, le=KAFKA_INT32_MAX)]
    #: -1 in ``changed``: the group had no committed offset there.
    offset: Annotated[int, Field(ge=-1, le=KAFKA_INT64_MAX)]


class GroupSnapshotEntry(SnapshotModel):
    group_id: str
    #: Every committed offset of the group before execute (all topics), for an exact rollback.
    offsets: list[SnapshotOffset]
    #: The partitions execute changed.
    changed: list[SnapshotOffset]

    @model_validator(mode="after")
    def _committed_offsets(self) -> GroupSnapshotEntry:
        # Rollback commits these: a hand-edited -1 would reach the broker as "no offset".
        for item in self.offsets:
            if item.offset < 0:
                raise ValueError(f"offsets: {item.topic}[{item.partition}] has offset {item.offset}")
        return self


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
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"rollback snapshot {path} not found") from None
    except (OSError, ValueError) as exc:  # a folder, no permission, a NUL in the name
        raise _unreadable(str(path), str(exc)) from None
    return parse_snapshot(data, str(path))


def _unreadable(name: str, problem: str) -> ConfigError:
    return ConfigError(f"rollback snapshot {name} is not readable: {problem}")


def parse_snapshot(data: bytes, name: str) -> OffsetSnapshot:
    """:func:`read_snapshot` of a file's bytes, ``name`` naming it in errors."""
    document = parse_json(data, lambda problem: _unreadable(name, f"not JSON: {problem}"))
    return validate(OffsetSnapshot, document, lambda problem: _unreadable(name, f"malformed at {problem}"))
