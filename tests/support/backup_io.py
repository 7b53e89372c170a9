"""Helpers for tests that take backups and read them back (backup, restore and mapping tests).

``read_backup`` returns a backup's records in the same ``Record`` shape that
``tests.support.kafka_io.consume_all`` returns for a cluster, so a test can
assert ``read_backup(...) == consume_all(...)`` record for record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kbackup.backup import BackupJob, BackupSummary, run_backup
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.format.segments import iter_segment_batches
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage, open_storage
from tests.support.kafka_io import Record


def backup_job(
    cluster: LocalKafkaCluster,
    storage: StorageSettings | str | Path,
    backup_id: str,
    include: Sequence[str],
    *,
    exclude: Sequence[str] = (),
    connection: dict[str, Any] | None = None,
    **settings: Any,
) -> BackupJob:
    """A job backing up ``include`` from ``cluster``; ``settings`` are ``backup:`` keys."""
    storage_settings = storage if isinstance(storage, StorageSettings) else StorageSettings(url=str(storage))
    source = SourceSettings.model_validate(
        {
            "bootstrap_servers": [cluster.bootstrap_servers],
            "topics": {"include": list(include), "exclude": list(exclude)},
            **(connection or {}),
        }
    )
    return BackupJob(
        backup_id=backup_id,
        source=source,
        storage=storage_settings,
        settings=BackupSettings.model_validate(settings),
    )


def take_backup(
    cluster: LocalKafkaCluster,
    storage: StorageSettings | str | Path,
    backup_id: str,
    include: Sequence[str],
    **settings: Any,
) -> BackupSummary:
    """Run one snapshot backup in this process."""
    return run_backup(backup_job(cluster, storage, backup_id, include, **settings))


def record_from_row(row: dict[str, Any]) -> Record:
    return Record(
        key=row["key"],
        value=row["value"],
        headers=tuple((header["key"], header["value"]) for header in row["headers"]),
        timestamp=row["timestamp"],
        partition=row["partition"],
        offset=row["offset"],
        topic=row["topic"],
        # The backup keeps Kafka's numbering (-1 none, 0 CreateTime, 1 LogAppendTime);
        # consume_all reports confluent-kafka's (0, 1, 2).
        timestamp_type=row["timestamp_type"] + 1,
    )


def read_backup(
    storage: Storage | StorageSettings | str | Path,
    backup_id: str,
    topics: Iterable[str] | None = None,
) -> list[Record]:
    """Every record of a backup (all increments), sorted by topic, partition and offset.

    Reads only through the format's reader APIs, verifying each segment's size and SHA-256.
    """
    store = storage if isinstance(storage, Storage) else open_storage(_as_settings(storage))
    wanted = set(topics) if topics is not None else None
    backup = BackupCatalog(store).load(backup_id)
    records: list[Record] = []
    for (topic, _partition), coverage in sorted(backup.coverage().items()):
        if wanted is not None and topic not in wanted:
            continue
        for segment in coverage.segments:
            for batch in iter_segment_batches(store, backup_id, segment, keys=backup.keys):
                records.extend(record_from_row(row) for row in batch.to_pylist())
    return sorted(records, key=lambda r: (r.topic or "", r.partition or 0, r.offset or 0))


def source_clusters_in(storage: Storage | StorageSettings | str | Path, backup_id: str) -> set[str]:
    """The distinct ``source_cluster`` values in a backup's rows."""
    store = storage if isinstance(storage, Storage) else open_storage(_as_settings(storage))
    backup = BackupCatalog(store).load(backup_id)
    found: set[str] = set()
    for coverage in backup.coverage().values():
        for segment in coverage.segments:
            for batch in iter_segment_batches(store, backup_id, segment, keys=backup.keys):
                found.update(batch.column("source_cluster").to_pylist())
    return found


def _as_settings(storage: StorageSettings | str | Path) -> StorageSettings:
    return storage if isinstance(storage, StorageSettings) else StorageSettings(url=str(storage))
