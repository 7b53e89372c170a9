"""``status``: how recent each backup is (its recovery point) and how far it is behind its source.

The storage alone says when each backup last committed an increment, what it holds and the
restorable window of each partition. With the source cluster reachable, the live end offsets
say how many records the backup does not hold yet. :func:`find_breaches` turns that into
alerts against ``--max-age`` and ``--max-lag``; it is pure so it is tested without Kafka.

One backup that cannot be read (a damaged manifest, an encrypted one without its key) must not
hide the others' recovery points and alerts: :func:`collect_status` reports it as an
:class:`UnreadableBackup` beside the statuses of the rest, and fails only when none can be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbackup.core.config import KafkaConnection
from kbackup.core.durations import format_duration
from kbackup.core.errors import (
    BackupIntegrityError,
    EncryptionKeyError,
    KafkaUnreachableError,
    KBackupError,
    NotFoundError,
    PreconditionError,
)
from kbackup.core.kafka import open_admin
from kbackup.core.logs import get_logger
from kbackup.core.times import iso_of_ms, parse_iso
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.storage import Storage

log = get_logger("backup.status")


@dataclass
class PartitionStatus:
    """One source partition: what the backup holds of it and, if the source was read, what it lacks."""

    topic: str
    partition: int
    #: Everything the source held below this offset is in the backup (0 for a partition it never saw).
    backed_up_end_offset: int
    records: int
    #: The restorable window: the first and last record backed up (None: no record yet).
    first_offset: int | None = None
    last_offset: int | None = None
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    #: The source's end offset now (its last stable offset when the backup reads read_committed).
    live_end_offset: int | None = None
    live_log_start_offset: int | None = None

    @property
    def lag(self) -> int | None:
        """Records on the source that the backup does not hold yet (None: the source was not read)."""
        if self.live_end_offset is None:
            return None
        # Records that retention deleted before a backup copied them are lost, not behind.
        start = max(self.backed_up_end_offset, self.live_log_start_offset or 0)
        return max(0, self.live_end_offset - start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "records": self.records,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "first_time": iso_time(self.first_timestamp),
            "last_time": iso_time(self.last_timestamp),
            "backed_up_end_offset": self.backed_up_end_offset,
            "live_end_offset": self.live_end_offset,
            "live_log_start_offset": self.live_log_start_offset,
            "lag_records": self.lag,
        }


@dataclass
class BackupStatus:
    backup_id: str
    source_cluster: str
    kafka_cluster_id: str | None
    increments: int
    last_increment: int
    #: When the last increment was committed: the recovery point.
    last_committed_at: str
    age_seconds: float
    records: int
    bytes: int
    partitions: list[PartitionStatus] = field(default_factory=list)
    #: Bootstrap servers whose end offsets were read (None: the source was not read).
    source_checked: str | None = None
    #: Why the lag is unknown, when a source was given but could not be used.
    lag_unknown_reason: str | None = None

    @property
    def lag(self) -> int | None:
        if self.source_checked is None:
            return None
        return sum(item.lag or 0 for item in self.partitions)

    def most_behind(self) -> PartitionStatus | None:
        behind = [item for item in self.partitions if item.lag]
        return max(behind, key=lambda item: item.lag or 0) if behind else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "source_cluster": self.source_cluster,
            "kafka_cluster_id": self.kafka_cluster_id,
            "increments": self.increments,
            "last_increment": self.last_increment,
            "last_committed_at": self.last_committed_at,
            "age_seconds": round(self.age_seconds, 3),
            "records": self.records,
            "bytes": self.bytes,
            "source_checked": self.source_checked,
            "lag_records": self.lag,
            "lag_unknown_reason": self.lag_unknown_reason,
            "partitions": [item.to_dict() for item in self.partitions],
        }


#: The errors that make one backup unreadable and leave the others readable. A storage that
#: cannot be read (StorageError) fails the whole check: the next backup would fail the same way.
#: NotFoundError: a listed backup whose manifests a retention generation leaves none of, or one a
#: prune removed since the listing.
UNREADABLE_ERRORS = (BackupIntegrityError, EncryptionKeyError, NotFoundError)

DAMAGED_HINT = "recover the object it names (bucket versioning, a copy) or remove that backup"


@dataclass(frozen=True)
class UnreadableBackup:
    """A backup whose status cannot be known, and why."""

    backup_id: str
    error: KBackupError

    @property
    def message(self) -> str:
        return self.error.message

    @property
    def hint(self) -> str:
        return self.error.hint or DAMAGED_HINT

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "kind": self.error.kind,
            "exit_code": self.error.exit_code,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass
class StatusReport:
    """What ``status`` found: each readable backup's status, and the backups it could not read."""

    statuses: list[BackupStatus]
    unreadable: list[UnreadableBackup] = field(default_factory=list)


@dataclass(frozen=True)
class Breach:
    """One limit a backup exceeds."""

    backup_id: str
    #: ``max-age`` or ``max-lag``.
    limit_name: str
    value: float
    limit: float
    message: str

    @property
    def excess(self) -> float:
        return self.value - self.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "limit": self.limit_name,
            "value": self.value,
            "allowed": self.limit,
            "excess": self.excess,
            "message": self.message,
        }


def iso_time(millis: int | None) -> str | None:
    if millis is None or millis < 0:
        return None
    return iso_of_ms(millis)


def backup_status(backup: Backup, *, now: datetime) -> BackupStatus:
    """What the manifests say: the last commit, its age, and each partition's restorable window."""
    latest = backup.latest
    partitions = []
    for (topic, partition), item in sorted(backup.coverage().items()):
        segments = item.segments
        partitions.append(
            PartitionStatus(
                topic=topic,
                partition=partition,
                backed_up_end_offset=item.end_offset,
                records=item.record_count,
                first_offset=segments[0].first_offset if segments else None,
                last_offset=segments[-1].last_offset if segments else None,
                first_timestamp=min((s.min_timestamp for s in segments), default=None),
                last_timestamp=max((s.max_timestamp for s in segments), default=None),
            )
        )
    return BackupStatus(
        backup_id=backup.backup_id,
        source_cluster=backup.source_cluster,
        kafka_cluster_id=latest.source.kafka_cluster_id,
        increments=len(backup.manifests),
        last_increment=latest.increment,
        last_committed_at=latest.finished_at,
        age_seconds=max(0.0, (now - parse_iso(latest.finished_at)).total_seconds()),
        records=backup.total_records(),
        bytes=backup.total_bytes(),
        partitions=partitions,
    )


def add_live_offsets(status: BackupStatus, backup: Backup, connection: KafkaConnection) -> None:
    """Read the source's end offsets of every partition of the backed-up topics.

    A partition the source has and the backup has not seen (one added to a topic after the last
    increment) is behind by everything the source holds of it. Raises ``KafkaUnreachableError``
    when no broker answers, and ``PreconditionError`` when the cluster is not the backup's source.
    """
    admin = open_admin(connection, client_id="kafka-backup-status")
    metadata = admin.metadata(action="read the source's end offsets")
    servers = ",".join(connection.bootstrap_servers)
    if status.kafka_cluster_id is not None and metadata.cluster_id != status.kafka_cluster_id:
        raise PreconditionError(
            f"{servers} is Kafka cluster {metadata.cluster_id}, but backup {status.backup_id} was taken "
            f"from cluster {status.kafka_cluster_id}: its lag there means nothing",
            hint="give the backup's source cluster (--bootstrap-servers or the config's source section)",
        )
    known = {(item.topic, item.partition): item for item in status.partitions}
    wanted: list[TopicPartitionKey] = list(known)
    for topic in sorted({item.topic for item in status.partitions}):
        live = metadata.topics.get(topic)
        if live is None:
            continue
        for partition in range(live.partitions):
            if (topic, partition) not in known:
                added = PartitionStatus(topic=topic, partition=partition, backed_up_end_offset=0, records=0)
                known[(topic, partition)] = added
                status.partitions.append(added)
                wanted.append((topic, partition))
    read_committed = backup.latest.settings.get("isolation_level", "read_committed") != "read_uncommitted"
    # A topic deleted since the backup is left out of the answer: its lag stays unknown.
    present = [key for key in wanted if key[0] in metadata.topics]
    ends = admin.list_offsets(present, "latest", read_committed=read_committed, missing_ok=True)
    starts = admin.list_offsets(present, "earliest", read_committed=read_committed, missing_ok=True)
    for key, end in ends.items():
        known[key].live_end_offset = end
        known[key].live_log_start_offset = starts.get(key)
    status.partitions.sort(key=lambda item: (item.topic, item.partition))
    status.source_checked = servers


def collect_status(
    storage: Storage,
    backup_ids: list[str] | None,
    *,
    source: KafkaConnection | None,
    lag_required: bool = False,
    now: datetime | None = None,
) -> StatusReport:
    """The status of the named backups (None: every backup in the storage), with the source's lag
    when ``source`` is given.

    With ``lag_required`` (``--max-lag``) a source that cannot be read is an error; without it the
    status is still worth showing, so the reason is recorded and the lag left unknown.

    A backup that cannot be read is reported in ``unreadable`` and the others are still read. When
    none can be read there is no status to show: the error is raised (the backup's own, or one
    naming each when there are several).
    """
    catalog = BackupCatalog(storage)
    ids = backup_ids if backup_ids is not None else catalog.backup_ids()
    if not ids:
        raise NotFoundError(
            f"no backup in {storage.url}",
            hint="check --path or storage.url; 'kafka-backup list' shows the backups there",
        )
    moment = now or datetime.now(UTC)
    statuses = []
    unreadable: list[UnreadableBackup] = []
    unreachable: str | None = None
    for backup_id in ids:
        try:
            backup = catalog.load(backup_id)
        except UNREADABLE_ERRORS as exc:
            unreadable.append(UnreadableBackup(backup_id, exc))
            log.info("backup unreadable: %s", exc.message, extra={"backup_id": backup_id})
            continue
        status = backup_status(backup, now=moment)
        statuses.append(status)
        if source is None:
            continue
        if unreachable is not None:
            # One timeout is enough: asking again for each backup would only multiply the wait.
            status.lag_unknown_reason = unreachable
            continue
        unreachable = _add_lag(status, backup, source, lag_required=lag_required)
    if not statuses:
        raise _none_readable(unreadable, storage.url)
    return StatusReport(statuses=statuses, unreadable=unreadable)


def _add_lag(
    status: BackupStatus, backup: Backup, source: KafkaConnection, *, lag_required: bool
) -> str | None:
    """The source's offsets into ``status``, or (unless ``lag_required``) why its lag is unknown.
    Returns that reason when the source is unreachable: the backups after this one do not ask again."""
    try:
        add_live_offsets(status, backup, source)
    except (KafkaUnreachableError, PreconditionError) as exc:
        if lag_required:
            raise
        status.lag_unknown_reason = exc.message
        log.info("lag unknown: %s", exc.message, extra={"backup_id": backup.backup_id})
        return exc.message if isinstance(exc, KafkaUnreachableError) else None
    return None


def _none_readable(unreadable: list[UnreadableBackup], storage_url: str) -> KBackupError:
    """The error of a status with nothing to show: the one backup's, or the first's kind naming each."""
    first = unreadable[0].error
    if len(unreadable) == 1:
        return first
    reasons = "; ".join(f"{item.backup_id}: {item.message}" for item in unreadable)
    return type(first)(
        f"none of the {len(unreadable)} backups in {storage_url} can be read: {reasons}",
        hint=unreadable[0].hint,
    )


def find_breaches(
    statuses: list[BackupStatus], *, max_age_secs: float | None, max_lag: int | None
) -> list[Breach]:
    """Every limit each backup exceeds, one breach per backup and limit.

    A ``max_lag`` with a backup whose lag is unknown is a caller's error (the source must have
    been read): it raises ``PreconditionError`` rather than pass the check silently.
    """
    breaches: list[Breach] = []
    for status in statuses:
        if max_age_secs is not None and status.age_seconds > max_age_secs:
            breaches.append(
                Breach(
                    backup_id=status.backup_id,
                    limit_name="max-age",
                    value=status.age_seconds,
                    limit=max_age_secs,
                    message=(
                        f"backup {status.backup_id}: last increment {status.last_increment} was committed "
                        f"{format_duration(status.age_seconds)} ago ({status.last_committed_at}), "
                        f"{format_duration(status.age_seconds - max_age_secs)} over --max-age "
                        f"{format_duration(max_age_secs)}"
                    ),
                )
            )
        if max_lag is None:
            continue
        lag = status.lag
        if lag is None:
            raise PreconditionError(
                f"backup {status.backup_id}: --max-lag needs the source's end offsets, which were not read",
                hint="give --bootstrap-servers or a config file with a source section",
            )
        if lag > max_lag:
            worst = status.most_behind()
            where = f"; most behind: {worst.topic}/{worst.partition} by {worst.lag:,}" if worst else ""
            breaches.append(
                Breach(
                    backup_id=status.backup_id,
                    limit_name="max-lag",
                    value=lag,
                    limit=max_lag,
                    message=(
                        f"backup {status.backup_id}: {lag:,} record(s) behind the source, "
                        f"{lag - max_lag:,} over --max-lag {max_lag:,}{where}"
                    ),
                )
            )
    return breaches
