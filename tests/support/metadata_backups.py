"""Backups whose increments name a cluster-metadata file (docs/format.md, "Cluster metadata"),
written as the backup stage writes them (the file create-if-absent, then the manifest that names
it) without a cluster: the metadata is built by hand, the records are made up.

``commit_increment`` writes increment N of backup ``b``: run ``runN``, finished on day N + 1 of
January 2026, one topic ``t`` of one partition with five records at offsets 5N..5N+4 timed on
that day; an encrypted backup's increments (``keys``) hold no segment, only the manifest and its
file.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbackup.backup.cluster_capture import write_cluster_metadata
from kbackup.backup.group_history import store_readings
from kbackup.format.catalog import commit_manifest
from kbackup.format.cluster_metadata import (
    AclBinding,
    AclsSection,
    BrokerConfigsSection,
    ClusterMetadata,
    ScramCredentialInfo,
    ScramUser,
    ScramUsersSection,
    encode_cluster_metadata,
)
from kbackup.format.encryption import BackupKeys
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, Manifest, SourceInfo
from kbackup.format.segments import SegmentLimits
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import Storage

BACKUP_ID = "b"
RECORDS_PER_INCREMENT = 5


def day_of(increment: int) -> datetime:
    """When increment ``increment`` was taken: 1 January 2026 for increment 0, a day later each."""
    return datetime(2026, 1, 1 + increment, tzinfo=UTC)


def cluster_metadata(increment: int, backup_id: str = BACKUP_ID) -> ClusterMetadata:
    """What increment ``increment`` of run ``run<increment>`` read of a cluster: an ACL of a user
    named after the increment, that user with a SCRAM credential, no broker config."""
    user = f"app-{increment}"
    return ClusterMetadata(
        backup_id=backup_id,
        increment=increment,
        run_id=f"run{increment}",
        taken_at=f"{day_of(increment).date()}T00:00:30.000Z",
        acls=AclsSection(
            status="captured",
            bindings=[
                AclBinding(
                    resource_type="TOPIC",
                    resource_name="t",
                    pattern_type="LITERAL",
                    principal=f"User:{user}",
                    host="*",
                    operation="READ",
                    permission="ALLOW",
                )
            ],
        ),
        scram_users=ScramUsersSection(
            status="captured",
            users=[
                ScramUser(
                    user=user, credentials=[ScramCredentialInfo(mechanism="SCRAM-SHA-256", iterations=4096)]
                )
            ],
        ),
        broker_configs=BrokerConfigsSection(status="captured"),
    )


def commit_increment(
    storage: Storage,
    scratch: Path,
    increment: int,
    *,
    keys: BackupKeys | None = None,
    sealed_with: BackupKeys | None = None,
    backup_id: str = BACKUP_ID,
    group_history: bool = False,
) -> Manifest:
    """Write increment ``increment``'s cluster-metadata file (and with ``group_history`` a
    group-history file of two readings of group ``g`` on ``t/0``), then its manifest naming it.

    ``sealed_with``: the file is sealed under these keys instead of ``keys`` (the backup's), and
    the manifest names it with its true size and SHA-256: a file that only authentication can
    tell from the backup's own.
    """
    ref = write_cluster_metadata(storage, cluster_metadata(increment, backup_id), sealed_with or keys)
    day = day_of(increment).date()
    fields: dict[str, Any] = {
        "increment": increment,
        "previous_run_id": f"run{increment - 1}" if increment else None,
        "tool_version": "test",
        "started_at": f"{day}T00:00:00.000Z",
        "finished_at": f"{day}T00:01:00.000Z",
        "source": SourceInfo(cluster_id="src", kafka_cluster_id="K"),
        "settings": {"mode": "snapshot"},
        "cluster_metadata": ref,
    }
    if group_history:
        readings = [
            ConsumerGroupsSnapshot(
                taken_at=f"{day}T00:00:{second:02d}.000Z",
                groups=[
                    GroupSnapshot(group_id="g", offsets=[GroupOffset(topic="t", partition=0, offset=offset)])
                ],
            )
            for second, offset in (
                (10, increment * RECORDS_PER_INCREMENT),
                (20, increment * RECORDS_PER_INCREMENT + 1),
            )
        ]
        fields["group_history"] = store_readings(
            storage,
            readings,
            backup_id=backup_id,
            increment=increment,
            run_id=f"run{increment}",
            interval_secs=10.0,
            keys=sealed_with or keys,
        )
    if keys is not None:
        manifest = Manifest(backup_id=backup_id, run_id=f"run{increment}", **fields)
        commit_manifest(storage, manifest, keys)
        return manifest
    builder = BackupBuilder(
        storage,
        backup_id,
        source_cluster="src",
        scratch_dir=scratch,
        limits=SegmentLimits(max_records=RECORDS_PER_INCREMENT),
        run_id=f"run{increment}",
    )
    builder.topic("t", 1)
    first = increment * RECORDS_PER_INCREMENT
    stamp = int(day_of(increment).timestamp() * 1000)
    records = (
        BackupRecord(offset, b"v", timestamp=stamp + offset)
        for offset in range(first, first + RECORDS_PER_INCREMENT)
    )
    builder.partition("t", 0, records, start_offset=first, end_offset=first + RECORDS_PER_INCREMENT)
    return builder.commit(**fields)


def metadata_bytes(increment: int, keys: BackupKeys | None = None, backup_id: str = BACKUP_ID) -> bytes:
    """A cluster-metadata file of increment ``increment`` as a run would write it (not stored)."""
    return encode_cluster_metadata(cluster_metadata(increment, backup_id), keys)
