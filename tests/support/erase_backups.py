"""Backups of keyed records for the erase tests, and their oracle: what a backup must hold after
given keys are erased (every other record, every column as it was)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from kbackup.erase import execute_erase, plan_erase
from kbackup.format.catalog import BackupCatalog
from kbackup.format.record_match import RecordMatcher, RecordMatchSettings
from kbackup.format.segments import SegmentLimits, iter_segment_batches
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import Storage
from tests.support.kafka_io import Record

#: (topic, partition, offset, timestamp, key, value, headers): one record as a backup holds it.
Row = tuple[str, int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def user_key(number: int) -> bytes:
    return b"user-%d" % number


def keyed_backup(
    storage: Storage,
    backup_id: str,
    scratch: Path,
    *,
    topic: str = "orders",
    increments: int = 3,
    partitions: int = 2,
    per_partition: int = 12,
    users: int = 5,
    segment_records: int = 4,
) -> list[Row]:
    """A backup of ``increments`` increments, keys ``user-<n % users>`` (and a null key every 7th
    record), headers ``region`` and ``n``, timestamps and values of their own; returns its records."""
    rows: list[Row] = []
    ends = dict.fromkeys(range(partitions), 0)
    for _ in range(increments):
        builder = BackupBuilder(
            storage, backup_id, scratch_dir=scratch, limits=SegmentLimits(max_records=segment_records)
        )
        builder.topic(topic, partitions)
        for partition in range(partitions):
            records = []
            # Every third offset is a hole (compaction), as a real log may have.
            for offset in range(ends[partition], ends[partition] + per_partition):
                if offset % 3 == 2:
                    continue
                key = None if offset % 7 == 0 else user_key((offset + partition) % users)
                headers = (("region", b"eu" if offset % 2 else b"us"), ("n", str(offset).encode()))
                record = BackupRecord(
                    offset=offset,
                    key=key,
                    value=b"value-%d-%d" % (partition, offset),
                    headers=headers,
                    timestamp=1_700_000_000_000 + offset * 1000 + partition,
                    timestamp_type=offset % 2,
                )
                records.append(record)
                rows.append((topic, partition, offset, record.timestamp, key, record.value, headers))
            builder.partition(topic, partition, records, end_offset=ends[partition] + per_partition)
            ends[partition] += per_partition
        builder.commit()
    return rows


def erase_keys(storage: Storage, backup_id: str, scratch: Path, request_id: str, *keys: bytes) -> None:
    """Plan and execute the erasure of ``keys`` (UTF-8 text) from one backup, in process."""
    matcher = RecordMatcher.from_settings(RecordMatchSettings(keys=[key.decode() for key in keys]))
    plan = plan_erase(storage, matcher, [backup_id], request_id=request_id)
    execute_erase(storage, plan, matcher, scratch_dir=scratch)


def held_rows(storage: Storage, backup_id: str) -> list[Row]:
    """Every record the backup holds as readers see it (newest revisions), by topic, partition, offset."""
    backup = BackupCatalog(storage).load(backup_id)
    rows: list[Row] = []
    for manifest in backup.manifests:
        for segment in manifest.segments:
            for batch in iter_segment_batches(storage, backup_id, segment, keys=backup.keys):
                for item in batch.to_pylist():
                    rows.append(
                        (
                            item["topic"],
                            item["partition"],
                            item["offset"],
                            item["timestamp"],
                            item["key"],
                            item["value"],
                            tuple((header["key"], header["value"]) for header in item["headers"]),
                        )
                    )
    return sorted(rows, key=lambda row: (row[0], row[1], row[2]))


def without_keys(rows: Iterable[Row], keys: Iterable[bytes]) -> list[Row]:
    """The oracle: ``rows`` less those whose key is one of ``keys``, in reading order."""
    erased = set(keys)
    return sorted(
        (row for row in rows if row[4] is None or row[4] not in erased),
        key=lambda row: (row[0], row[1], row[2]),
    )


def records_without(records: Iterable[Record], erased: set[bytes]) -> list[Record]:
    """The oracle of a backup taken from a cluster: its records less those of the erased keys."""
    return [record for record in records if record.key not in erased]


def keyed_source_records(partitions: int, per_partition: int, users: int, start: int = 0) -> list[Record]:
    """Records to produce: key ``user-<n % users>``, a header naming the record, value of its own."""
    return [
        Record(
            key=user_key(n % users),
            value=b"value-%d" % n,
            headers=(("n", str(n).encode()),),
            partition=n % partitions,
        )
        for n in range(start, start + partitions * per_partition)
    ]


def erase_command(
    config: Path, backup_id: str, request_id: str, keys: Iterable[bytes], *extra: str
) -> list[str]:
    """``kafka-backup erase`` as a subprocess command line (for the kill loop), with ``--key`` per key."""
    command = [
        sys.executable,
        "-m",
        "kbackup",
        "erase",
        backup_id,
        "-c",
        str(config),
        "--request-id",
        request_id,
    ]
    for key in keys:
        command += ["--key", key.decode()]
    return [*command, *extra]
