"""The manifest: the one object that makes a backup increment exist.

Readers ignore fields they do not know (so later minor additions do not break
older readers) and refuse a ``format_version`` above the one they implement.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from kbackup.core.errors import BackupIntegrityError
from kbackup.core.times import utc_now_iso as utc_now_iso  # its callers import it from here
from kbackup.format.documents import parse_json, validate
from kbackup.format.schema import FORMAT_NAME, FORMAT_VERSION


class ManifestModel(BaseModel):
    """Unknown fields are ignored on read (forward compatibility)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class SourceInfo(ManifestModel):
    #: The origin cluster id stamped on every record (a user label or the Kafka cluster id).
    cluster_id: str
    #: The Kafka cluster id the source reported, whatever label was chosen.
    kafka_cluster_id: str | None = None
    bootstrap_servers: list[str] = Field(default_factory=list)


class TopicEntry(ManifestModel):
    name: str
    partitions: int
    #: Topic configs that are not broker defaults (cleanup.policy, retention.ms, message.timestamp.type, ...).
    configs: dict[str, str] = Field(default_factory=dict)
    #: Replicas per partition on the source (informational; the target may have fewer brokers).
    replication_factor: int | None = None
    #: Kafka's topic id: a topic deleted and re-created under the same name gets a new one.
    topic_id: str | None = None


class PartitionEntry(ManifestModel):
    """What one increment copied of one source partition."""

    topic: str
    partition: int
    #: Copying started here (the previous increment's end_offset, or the log start for the first).
    start_offset: int
    #: Every record with start_offset <= offset < end_offset that the source held is in the backup.
    end_offset: int
    #: The source's log start offset when the increment ran (records below it were already deleted).
    log_start_offset: int
    record_count: int
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None


class SegmentEntry(ManifestModel):
    """One Parquet file of one topic-partition."""

    #: Object key relative to the backup's folder.
    key: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    sha256: str
    min_timestamp: int
    max_timestamp: int


class GroupOffset(ManifestModel):
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    leader_epoch: int | None = None


class GroupSnapshot(ManifestModel):
    group_id: str
    #: Group state when the snapshot was taken (Empty, Stable, ...), if the cluster said.
    state: str | None = None
    offsets: list[GroupOffset] = Field(default_factory=list)


class ConsumerGroupsSnapshot(ManifestModel):
    #: Taken before the increment read the end offsets it copies up to, so every offset is covered.
    taken_at: str
    groups: list[GroupSnapshot] = Field(default_factory=list)
    #: When its last answer came: every offset in it was committed by then (None: written before
    #: kafka-backup recorded it). A position "as of" a moment is read from a snapshot finished by then.
    finished_at: str | None = None


class MetadataKindSummary(ManifestModel):
    #: captured, no_authorizer, not_authorized or failed (docs/format.md, "Cluster metadata").
    status: str
    #: Items the file holds of this kind.
    count: int


class ClusterMetadataRef(ManifestModel):
    """The increment's cluster-metadata file (ACLs, SCRAM users, dynamic broker configs)."""

    #: Object key relative to the backup's folder.
    key: str
    size_bytes: int
    sha256: str
    acls: MetadataKindSummary
    scram_users: MetadataKindSummary
    broker_configs: MetadataKindSummary
    #: SHA-256 of what the file says of the cluster (not when or by which run): a later run that
    #: reads the same commits no increment for it.
    content_sha256: str | None = None

    def kinds(self) -> dict[str, dict[str, str | int]]:
        """Per kind, its status and count (as a run's summary and ``describe`` show them)."""
        return {kind: getattr(self, kind).model_dump() for kind in ("acls", "scram_users", "broker_configs")}


class PartitionErased(ManifestModel):
    """How many records of one partition an erasure removed from an increment."""

    topic: str
    partition: int
    records: int


class ErasureNote(ManifestModel):
    """One erasure that rewrote this increment (docs/format.md, "Manifest revisions"): what it
    removed, never which keys. The erasure record of ``request_id`` adds these up."""

    request_id: str
    #: The erase run that wrote the revision (its new segments carry this run id in their names).
    run_id: str
    erased_at: str
    partitions: list[PartitionErased] = Field(default_factory=list)


class GroupHistoryRef(ManifestModel):
    """The increment's group-history file: the groups' offsets read between increments
    (``backup.group_snapshot_interval``; docs/format.md, "Group history")."""

    #: Object key relative to the backup's folder.
    key: str
    size_bytes: int
    sha256: str
    #: How many readings the file holds, and the first's and last's times.
    readings: int
    first_taken_at: str | None = None
    last_taken_at: str | None = None
    #: The interval they were read at, in seconds: the precision of a position read from them.
    interval_secs: float


class Manifest(ManifestModel):
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    backup_id: str
    #: 0 for the first run of a backup id, then 1, 2, ... for each run that adds to it.
    increment: int
    run_id: str
    #: run_id of increment - 1 (None for increment 0): readers check the chain is unbroken.
    previous_run_id: str | None = None
    tool_version: str
    started_at: str
    finished_at: str
    source: SourceInfo
    #: How the records were read and written: isolation_level, compression, include_offset_headers.
    settings: dict[str, str | int | bool | None] = Field(default_factory=dict)
    topics: list[TopicEntry] = Field(default_factory=list)
    partitions: list[PartitionEntry] = Field(default_factory=list)
    segments: list[SegmentEntry] = Field(default_factory=list)
    consumer_groups: ConsumerGroupsSnapshot | None = None
    #: None: the increment did not capture the cluster's metadata (written before it existed).
    cluster_metadata: ClusterMetadataRef | None = None
    #: None (absent): no group readings between the previous increment's snapshot and this one's.
    group_history: GroupHistoryRef | None = None
    #: 0 (absent): as the backup run wrote it; N: the N-th rewrite by ``erase``, stored as
    #: ``<increment>.r<N>.json`` (the name and this field must agree).
    revision: int = 0
    #: Every erasure that rewrote this increment, oldest first (absent: none).
    erasures: list[ErasureNote] = Field(default_factory=list)

    def document(self) -> dict[str, object]:
        """The manifest as JSON values; ``revision`` and ``erasures`` only once an erasure rewrote it,
        and ``group_history`` only when the increment has one, so a backup run's manifest stays byte
        for byte what it was before these existed."""
        dumped = self.model_dump(mode="json")
        if not self.revision and not self.erasures:
            del dumped["revision"], dumped["erasures"]
        if self.group_history is None:
            del dumped["group_history"]
        return dumped

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.document(), indent=2, sort_keys=False) + "\n").encode()


def parse_manifest(data: bytes, object_name: str) -> Manifest:
    """Parse and check a manifest; every problem is a BackupIntegrityError naming the object."""
    raw = parse_json(
        data, lambda problem: BackupIntegrityError(f"manifest {object_name} is not valid JSON: {problem}")
    )
    if not isinstance(raw, dict):
        raise BackupIntegrityError(f"manifest {object_name} is not a JSON object")
    if raw.get("format") != FORMAT_NAME:
        raise BackupIntegrityError(
            f"{object_name} is not a kafka-backup manifest (format={raw.get('format')!r})"
        )
    version = raw.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BackupIntegrityError(f"manifest {object_name} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise BackupIntegrityError(
            f"manifest {object_name} has format version {version}, "
            f"this kafka-backup reads versions up to {FORMAT_VERSION}",
            hint="upgrade kafka-backup to read this backup",
        )
    return validate(
        Manifest,
        raw,
        lambda problem: BackupIntegrityError(f"manifest {object_name} is malformed at {problem}"),
    )
