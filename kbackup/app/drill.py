"""The disaster-recovery drill: back up, restore under a drill prefix, map, move copies of the groups,
and prove that no group would skip a record it had not processed on the source.

``run_drill`` works on any two clusters (CI pipelines run it on a schedule);
``run_local_drill`` starts two throwaway local clusters, fills the source with
realistic data (see :mod:`kbackup.app.drill_data`) and runs the same drill.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kbackup import __version__
from kbackup.app.config import KBackupConfig
from kbackup.app.drill_access import APP_USERS, SUPER_USER, DrillUsers, grant_source_rights, prove_access
from kbackup.app.drill_history import (
    AUTO,
    AsOf,
    LocalHistory,
    auto_moment,
    latest_reading_by,
    readings_of,
    record_history,
)
from kbackup.app.drill_proof import Verification, verify_positions
from kbackup.app.drill_report import (
    AccessOutcome,
    AsOfFacts,
    ClusterInfo,
    DrillReport,
    check_report_writable,
    config_digest,
    write_report,
)
from kbackup.app.drill_settings import DrillSettings, ThreePhaseSettings
from kbackup.app.metrics import RecoveryMetrics
from kbackup.app.overrides import spark_engine
from kbackup.app.three_phase import (
    ThreePhaseSummary,
    job_backup,
    require_origin_headers,
    three_phase_restore,
)
from kbackup.backup.settings import SourceSettings, TopicSelection
from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.core.errors import ConfigError, InterruptedByUser
from kbackup.core.kafka import open_admin
from kbackup.core.progress import Progress
from kbackup.core.times import iso_utc
from kbackup.format.catalog import Backup
from kbackup.format.group_history import Positions, positions_of
from kbackup.format.manifest import utc_now_iso
from kbackup.mapping.settings import MappingSettings
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.metadata_settings import MetadataRestoreSettings

if TYPE_CHECKING:
    from kbackup.sandbox.kafka import LocalKafkaCluster

#: The access proof a drill runs after its position proof, given the drill's topic renames.
AccessProof = Callable[[Mapping[str, str]], list[AccessOutcome]]


def drill_config(
    config: KBackupConfig,
    backup_id: str,
    topics: list[str],
    work_dir: Path,
    as_of: datetime | None = None,
) -> KBackupConfig:
    """The restore side of a drill: topics and groups renamed with the drill prefixes; ``as_of``: the
    records and the groups of that moment (``restore.as_of`` and ``offset_reset.as_of``)."""
    drill = config.drill
    renamed = {topic: drill.topic_prefix + topic for topic in topics}
    return config.model_copy(
        update={
            "backup_id": backup_id,
            "restore": config.restore.model_copy(update={"topic_mapping": renamed, "as_of": as_of}),
            "three_phase": ThreePhaseSettings(
                state_dir=str(work_dir / "three-phase-state"),
                build_mapping=config.three_phase.build_mapping,
                group_prefix=drill.group_prefix,
            ),
            # offset_reset.topic_mapping names a real recovery's topics: the drill's groups move on
            # the drill's own copies.
            "offset_reset": config.offset_reset.model_copy(
                update={"groups": drill.groups or config.offset_reset.groups,
                        "snapshot_dir": str(work_dir / "offset-snapshots"),
                        "topic_mapping": renamed,
                        "as_of": as_of}
            ),
        }
    )  # fmt: skip


#: The backup id of the local drill (``--local``).
LOCAL_DRILL_BACKUP_ID = "local-drill"


def drill_backup_id(config: KBackupConfig) -> str:
    """The backup a drill takes: the config's ``backup_id``, else one named after the time now."""
    return config.backup_id or f"drill-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"


def drill_report_for(config: KBackupConfig, *, backup_id: str, notes: list[str]) -> DrillReport:
    """The report of a drill starting now on ``config``: what ran it and with which configuration."""
    return DrillReport(
        started_at=utc_now_iso(),
        backup_id=backup_id,
        source_cluster="",
        storage=config.storage.resolved_url(),
        kafka_backup_version=__version__,
        config_sha256=config_digest(config),
        notes=list(notes),
    )


def run_drill(
    config: KBackupConfig,
    *,
    work_dir: Path,
    report_path: Path,
    backup_id: str | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    notes: list[str] | None = None,
    metrics: RecoveryMetrics | None = None,
    access_proof: AccessProof | None = None,
    as_of: AsOf | None = None,
    history: LocalHistory | None = None,
) -> DrillReport:
    """The drill on the config's clusters; ``backup_id`` is the backup to take when the config names
    none (else one is named after the time now); ``notes`` go into the report as they are; ``metrics``
    hears each phase start and what the three-phase restore reports (the caller says ``done``);
    ``access_proof``, given the drill's topic renames, checks the restored principals' rights after
    the position proof (its outcomes are the report's ``access``, part of its verdict).

    ``as_of`` (a moment, or ``auto``; None: ``restore.as_of`` or ``offset_reset.as_of`` of the
    config, if set): the drill takes no backup; it restores the backup the config names as of that
    moment of its group history, and proves each group against its position of then. ``history``:
    the local drill's follow run that wrote that history (the report's backup), whose record of the
    groups' commits checks the positions of the moment (a group not at one it had then fails)."""
    moment: AsOf | None = as_of or config.restore.as_of or config.offset_reset.as_of
    if moment is not None and not config.backup_id:
        raise ConfigError(
            "drill --as-of restores the backup the config names, as of a moment of its group history: "
            "the config names no backup_id",
            hint="set backup_id to the backup a follow run (backup.group_snapshot_interval) writes",
        )
    # Refused before the backup: the drill restores the backup it takes, with this config's
    # backup.include_offset_headers (as of a moment: the existing backup's).
    backed_up_with_headers = config.backup.include_offset_headers
    config = require_origin_headers(
        config,
        "drill",
        (lambda: job_backup(config).offset_headers)
        if moment is not None
        else (lambda: backed_up_with_headers),
    )
    if config.source is None or config.target is None:
        raise ConfigError("a drill needs 'source' and 'target' sections")
    check_report_writable(report_path)  # not lost after the drill's minutes

    backup_id = config.backup_id or backup_id or drill_backup_id(config)
    # The digest is of the config as given, without the backup id named for this run: one named after
    # the time would make every scheduled drill's digest differ from the last one's with the same file.
    report = drill_report_for(config, backup_id=backup_id, notes=list(notes or []))

    point: MomentPositions | None = None
    if moment is None:
        topics = take_backup(config, report, backup_id, progress=progress, stop=stop, metrics=metrics)
    else:
        # Before anything is restored: a moment the history cannot answer is one line (exit 10).
        point = moment_positions(config, moment)
        report.as_of = point.facts
        topics = sorted(point.backup.topics)
        report.source_cluster = point.backup.source_cluster
        engine = spark_engine(config)
        if engine is not None:
            report.notes.append(f"engine: spark on {engine.master} (restore copied by Spark tasks)")
        if history is None:
            report.backup = existing_backup_facts(point.backup, config.storage.resolved_url())
            report.notes.append(
                f"as of a moment: the drill took no backup; it restored backup {backup_id} as it stood, "
                "with the records and the groups' positions of the moment"
            )
        else:
            report.phase_seconds["backup"] = history.seconds
            report.backup = history.summary.to_dict()
            report.notes.extend(f"backup: {problem}" for problem in history.summary.problems)
            report.as_of.chosen = "auto: halfway through the drill's own commits of its groups, between two"
            report.as_of.groups = [
                group.to_dict()
                for group in history.check(
                    point.positions, as_of=point.moment, reading_taken_at=point.facts.reading_taken_at
                )
            ]

    restore_config = drill_config(
        config, backup_id, topics, work_dir, as_of=None if point is None else point.moment
    )
    report.topic_copies = dict(restore_config.restore.topic_mapping)
    summary: ThreePhaseSummary = three_phase_restore(
        restore_config, progress=progress, stop=stop, metrics=metrics
    )
    for phase in summary.phases:
        report.phase_seconds[phase.name] = phase.seconds
    report.three_phase = summary.to_dict()
    report.source = ClusterInfo(
        origin_id=report.source_cluster,
        kafka_cluster_id=job_backup(restore_config).latest.source.kafka_cluster_id,
        servers=config.source.describe(),
        brokers=len(open_admin(config.source).metadata().brokers),
    )
    report.target = ClusterInfo(
        origin_id=None,
        kafka_cluster_id=summary.target_cluster_id,
        servers=config.target.describe(),
        brokers=len(open_admin(config.target).metadata().brokers),
    )

    started = time.monotonic()
    if metrics is not None:
        metrics.phase("proof")
    positions = point.positions if point is not None else latest_positions(restore_config)
    verification = prove(restore_config, positions)
    report.phase_seconds["proof"] = time.monotonic() - started
    report.groups = verification.per_group()
    report.partitions = [verdict.__dict__ for verdict in verification.verdicts]
    report.skipped, report.reprocessed = verification.skipped, verification.reprocessed
    report.records_read_back = verification.records_read_back
    report.records_compared = verification.records_compared
    if metrics is not None:
        metrics.drill_proved(report.skipped)
    report.unproven = unproven_reason(restore_config, verification, positions if point is not None else None)
    if access_proof is not None:
        started = time.monotonic()  # within the metrics' proof phase: it is the proof's second half
        report.access = access_proof(restore_config.restore.topic_mapping)
        report.phase_seconds["access"] = time.monotonic() - started
    report.finished_at = utc_now_iso()
    write_report(report, report_path)
    return report


def take_backup(
    config: KBackupConfig,
    report: DrillReport,
    backup_id: str,
    *,
    progress: Progress | None,
    stop: threading.Event | None,
    metrics: RecoveryMetrics | None,
) -> list[str]:
    """The drill's own backup, into ``report``; the topics it backed up."""
    assert config.source is not None
    from kbackup.backup import BackupJob, run_backup

    started = time.monotonic()
    if metrics is not None:
        metrics.phase("backup")
    engine = spark_engine(config)
    if engine is not None:
        report.notes.append(f"engine: spark on {engine.master} (backup and restore copied by Spark tasks)")
    backed_up = run_backup(
        BackupJob(backup_id=backup_id, source=config.source, storage=config.storage, settings=config.backup),
        progress=progress,
        stop=stop,
        engine=engine,
    )
    if stop is not None and stop.is_set():
        raise InterruptedByUser("drill stopped by a signal during its backup; nothing was restored")
    report.phase_seconds["backup"] = time.monotonic() - started
    report.backup = backed_up.to_dict()
    report.source_cluster = backed_up.source_cluster_id
    # What the backup did not copy in full (a `backup` run would exit 14): the auditor sees it.
    report.notes.extend(f"backup: {problem}" for problem in backed_up.problems)
    return list(backed_up.topics)


@dataclass(frozen=True)
class MomentPositions:
    """The moment a drill restores as of, and the groups' positions of then."""

    backup: Backup
    moment: datetime
    positions: Positions
    facts: AsOfFacts


def moment_positions(config: KBackupConfig, as_of: AsOf) -> MomentPositions:
    """``as_of`` on the config's backup (``auto``: halfway through its readings of the groups), and
    the groups' positions of then; refused (exit 10) before the first reading, after the last, and
    after what the last increment holds of the records, before anything is restored."""
    from kbackup.reset import from_backup_as_of
    from kbackup.restore import check_as_of
    from kbackup.storage import open_storage

    storage = open_storage(config.storage)
    backup = job_backup(config)
    readings = readings_of(backup, storage)
    moment = auto_moment(readings, backup.backup_id) if as_of == AUTO else as_of
    assert isinstance(moment, datetime)
    source = from_backup_as_of(backup, storage, moment)
    check_as_of(backup, moment)
    facts = AsOfFacts(
        as_of=iso_utc(moment),
        chosen="given"
        if as_of != AUTO
        else "auto: halfway between the backup's first and last reading of the groups",
        precision_secs=source.info.precision_secs,
        reading_taken_at=source.info.taken_at,
        latest_reading_taken_at=latest_reading_by(readings, moment),
    )
    return MomentPositions(backup, moment, source.groups, facts)


def existing_backup_facts(backup: Backup, storage: str) -> dict[str, object]:
    """The report's backup section for a backup the drill restored without taking it."""
    return {
        "backup_id": backup.backup_id,
        "storage": storage,
        "source_cluster_id": backup.source_cluster,
        "mode": "existing",
        "topics": sorted(backup.topics),
        "increments": len(backup.manifests),
        "records": backup.total_records(),
        "taken_by_the_drill": False,
    }


def latest_positions(config: KBackupConfig) -> Positions:
    """The groups' positions in the backup's latest snapshot (none without one)."""
    snapshot = job_backup(config).consumer_groups
    return positions_of(snapshot) if snapshot is not None else {}


def unproven_reason(
    config: KBackupConfig, verification: Verification, positions: Positions | None = None
) -> str | None:
    """Why the drill proved nothing, or None when it judged at least one restored partition;
    ``positions``: the groups' positions of the moment of a drill as of a time.

    A drill that moved no group, or whose groups read no restored record, shows nothing about a
    restore: it must not pass."""
    if any(verdict.restored_records for verdict in verification.verdicts):
        return None
    if positions is not None and not any(positions.values()):
        return "no consumer group had committed offsets on the backed-up topics at the moment"
    backup = job_backup(config)
    snapshot = backup.consumer_groups
    if snapshot is None:
        return f"backup {backup.backup_id} holds no consumer-group snapshot (backup.consumer_group_snapshot)"
    if not snapshot.groups:
        return "no consumer group had committed offsets on the backed-up topics when the backup was taken"
    chosen = set(config.offset_reset.groups)
    if chosen and not chosen & {group.group_id for group in snapshot.groups}:
        return f"none of the groups chosen ({', '.join(sorted(chosen))}) is in the backup's snapshot"
    return "the moved groups' partitions hold no restored record"


def prove(config: KBackupConfig, positions: Positions) -> Verification:
    """Consume from each drill group's new position and judge it against its source offsets
    (``positions``: the backup's latest snapshot, or the groups' positions of the moment)."""
    assert config.target is not None
    backup = job_backup(config)
    mapping = config.restore.topic_mapping
    prefix = config.three_phase.group_prefix
    chosen = set(config.offset_reset.groups)
    groups = {
        prefix + group: dict(offsets) for group, offsets in positions.items() if not chosen or group in chosen
    }
    target_topics = sorted({mapping.get(t, t) for offsets in groups.values() for t, _ in offsets})
    counts = open_admin(config.target).partition_counts(target_topics)
    partitions_of = {
        group: [
            (mapping.get(topic, topic), q)
            for topic in sorted({t for t, _ in offsets})
            for q in range(counts[mapping.get(topic, topic)])
        ]
        for group, offsets in groups.items()
    }
    return verify_positions(
        config.target, source_cluster=backup.source_cluster, groups=groups, target_partitions_of=partitions_of
    )


def run_local_drill(
    *,
    report_path: Path,
    records_per_partition: int = 2_000,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    metrics: RecoveryMetrics | None = None,
    engine: Literal["local", "spark"] = "local",
    mapping: MappingSettings | None = None,
    encryption: EncryptionSettings | None = None,
    secured: bool = False,
    nodes: int = 1,
    as_of: bool = False,
) -> DrillReport:
    """Two throwaway local clusters, realistic data, the full drill on local-folder storage;
    ``engine`` and ``mapping`` (its Spark master and settings) as a config file says them.

    ``as_of``: the drill as of a moment (``--local --as-of auto``). Its backup is a follow run that
    reads the groups every second while some of them commit forward and new records arrive
    (:func:`kbackup.app.drill_history.record_history`); the drill then restores as of a moment
    halfway through those commits, and checks the groups' positions of then against its own
    record of the commits as well as proving them on the target.

    ``nodes``: each cluster's broker+controller nodes; three replicate every topic three ways with
    ``min.insync.replicas=2``, as production clusters do (:mod:`kbackup.sandbox.kafka`).

    ``secured``: both clusters run the authorizer with a super user, as whom the drill backs up and
    restores; the source's app users and their ACLs (:mod:`kbackup.app.drill_access`) come back
    through the metadata phase, and the access proof checks each app user's rights on both."""
    from kbackup.app.drill_data import fill_source
    from kbackup.sandbox.kafka import local_clusters

    check_report_writable(report_path)  # before two clusters are started and filled
    users = DrillUsers.generate() if secured else None
    with (
        tempfile.TemporaryDirectory(prefix="kbackup-drill-") as scratch,
        local_clusters(
            ["source", "target"],
            Path(scratch) / "clusters",
            scram_users=None if users is None else {"source": users.of_source(), "target": users.of_target()},
            super_user=None if users is None else SUPER_USER,
            nodes=nodes,
        ) as (source, target),
    ):
        # With the authorizer, connection() is the super user's over SCRAM.
        data = fill_source(source.connection(), records_per_partition=records_per_partition)
        work_dir = Path(scratch)
        config = KBackupConfig(
            backup_id=LOCAL_DRILL_BACKUP_ID,
            source=SourceSettings(
                bootstrap_servers=source.connection().bootstrap_servers,
                security=source.connection().security,
                topics=TopicSelection(include=sorted(data.topics)),
            ),
            target=target.connection(),
            storage=StorageSettings(url=str(work_dir / "backups"), encryption=encryption),
            drill=DrillSettings(),
            offset_reset=OffsetResetSettings(),
            engine=engine,
            mapping=mapping or MappingSettings(),
        )
        notes = (
            []
            if data.compaction_holes
            else ["the local data set has no compaction holes: the log cleaner did not compact in time"]
        )
        access_proof = None
        if users is not None:
            config, access_proof = secure_drill(
                config, users, source=source, target=target, work_dir=work_dir
            )
            notes.append(SECURED_NOTE)
        history = None
        if as_of:
            assert config.source is not None
            if metrics is not None:
                metrics.phase("backup")
            history = record_history(
                backup_id=LOCAL_DRILL_BACKUP_ID,
                source=config.source,
                storage=config.storage,
                settings=config.backup,
                data=data,
                stop=stop,
            )
            notes.append(HISTORY_NOTE)
        return run_drill(
            config,
            work_dir=work_dir,
            report_path=report_path,
            progress=progress,
            stop=stop,
            notes=notes,
            metrics=metrics,
            access_proof=access_proof,
            as_of=None if history is None else history.moment(),
            history=history,
        )


#: What the report of ``drill --local --as-of auto`` says its backup was.
HISTORY_NOTE = (
    "as of a moment: the drill's backup was a follow run reading the groups every second while "
    "analytics, audit and billing committed forward ten times and new clicks records arrived; the "
    "moment is halfway through those commits, and the records after it were not restored"
)


#: What the report of ``drill --local --secured`` says it drilled besides the data.
SECURED_NOTE = (
    f"secured: both clusters run StandardAuthorizer with the super user {SUPER_USER}; the metadata "
    f"phase restored the source's ACLs and SCRAM users ({', '.join(APP_USERS)}), whose rights the "
    "access section compares"
)


def secure_drill(
    config: KBackupConfig,
    users: DrillUsers,
    *,
    source: LocalKafkaCluster,
    target: LocalKafkaCluster,
    work_dir: Path,
) -> tuple[KBackupConfig, AccessProof]:
    """The source's app rights granted, and the config's metadata restore (the app users' passwords
    in a file in the drill's scratch folder, never in the report); the access proof to run after."""
    grant_source_rights(source.connection())
    passwords = users.write_passwords_file(work_dir / "scram-passwords.yaml")
    # ACLs and users only: the local clusters set no dynamic broker config, and every topic the
    # restore writes is new on the target (no existing topic's configs to compare).
    config = config.model_copy(
        update={
            "restore_metadata": MetadataRestoreSettings(
                enabled=True, kinds=["acls", "users"], scram_passwords_file=str(passwords)
            )
        }
    )

    def access_proof(topic_mapping: Mapping[str, str]) -> list[AccessOutcome]:
        return prove_access(
            users,
            source_servers=source.sasl_bootstrap_servers,
            target=target.connection(),
            target_servers=target.sasl_bootstrap_servers,
            topic_mapping=topic_mapping,
        )

    return config, access_proof
