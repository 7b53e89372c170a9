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
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kbackup import __version__
from kbackup.app.config import KBackupConfig
from kbackup.app.drill_access import APP_USERS, SUPER_USER, DrillUsers, grant_source_rights, prove_access
from kbackup.app.drill_proof import Verification, verify_positions
from kbackup.app.drill_report import (
    AccessOutcome,
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
from kbackup.format.manifest import utc_now_iso
from kbackup.mapping.settings import MappingSettings
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.metadata_settings import MetadataRestoreSettings

if TYPE_CHECKING:
    from kbackup.sandbox.kafka import LocalKafkaCluster

#: The access proof a drill runs after its position proof, given the drill's topic renames.
AccessProof = Callable[[Mapping[str, str]], list[AccessOutcome]]


def drill_config(config: KBackupConfig, backup_id: str, topics: list[str], work_dir: Path) -> KBackupConfig:
    """The restore side of a drill: topics and groups renamed with the drill prefixes."""
    drill = config.drill
    renamed = {topic: drill.topic_prefix + topic for topic in topics}
    return config.model_copy(
        update={
            "backup_id": backup_id,
            "restore": config.restore.model_copy(update={"topic_mapping": renamed}),
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
                        "topic_mapping": renamed}
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
) -> DrillReport:
    """The drill on the config's clusters; ``backup_id`` is the backup to take when the config names
    none (else one is named after the time now); ``notes`` go into the report as they are; ``metrics``
    hears each phase start and what the three-phase restore reports (the caller says ``done``);
    ``access_proof``, given the drill's topic renames, checks the restored principals' rights after
    the position proof (its outcomes are the report's ``access``, part of its verdict)."""
    # Refused before the backup: the drill restores the backup it takes, with this config's
    # backup.include_offset_headers.
    backed_up_with_headers = config.backup.include_offset_headers
    config = require_origin_headers(config, "drill", lambda: backed_up_with_headers)
    if config.source is None or config.target is None:
        raise ConfigError("a drill needs 'source' and 'target' sections")
    check_report_writable(report_path)  # not lost after the drill's minutes
    from kbackup.backup import BackupJob, run_backup

    backup_id = config.backup_id or backup_id or drill_backup_id(config)
    # The digest is of the config as given, without the backup id named for this run: one named after
    # the time would make every scheduled drill's digest differ from the last one's with the same file.
    report = drill_report_for(config, backup_id=backup_id, notes=list(notes or []))

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

    restore_config = drill_config(config, backup_id, backed_up.topics, work_dir)
    report.topic_copies = dict(restore_config.restore.topic_mapping)
    summary: ThreePhaseSummary = three_phase_restore(
        restore_config, progress=progress, stop=stop, metrics=metrics
    )
    for phase in summary.phases:
        report.phase_seconds[phase.name] = phase.seconds
    report.three_phase = summary.to_dict()
    report.source = ClusterInfo(
        origin_id=backed_up.source_cluster_id,
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
    verification = prove(restore_config)
    report.phase_seconds["proof"] = time.monotonic() - started
    report.groups = verification.per_group()
    report.partitions = [verdict.__dict__ for verdict in verification.verdicts]
    report.skipped, report.reprocessed = verification.skipped, verification.reprocessed
    report.records_read_back = verification.records_read_back
    report.records_compared = verification.records_compared
    if metrics is not None:
        metrics.drill_proved(report.skipped)
    report.unproven = unproven_reason(restore_config, verification)
    if access_proof is not None:
        started = time.monotonic()  # within the metrics' proof phase: it is the proof's second half
        report.access = access_proof(restore_config.restore.topic_mapping)
        report.phase_seconds["access"] = time.monotonic() - started
    report.finished_at = utc_now_iso()
    write_report(report, report_path)
    return report


def unproven_reason(config: KBackupConfig, verification: Verification) -> str | None:
    """Why the drill proved nothing, or None when it judged at least one restored partition.

    A drill that moved no group, or whose groups read no restored record, shows nothing about a
    restore: it must not pass."""
    if any(verdict.restored_records for verdict in verification.verdicts):
        return None
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


def prove(config: KBackupConfig) -> Verification:
    """Consume from each drill group's new position and judge it against its source offsets."""
    assert config.target is not None
    backup = job_backup(config)
    snapshot = backup.consumer_groups
    mapping = config.restore.topic_mapping
    prefix = config.three_phase.group_prefix
    chosen = set(config.offset_reset.groups)
    groups = {
        prefix + group.group_id: {(item.topic, item.partition): item.offset for item in group.offsets}
        for group in (snapshot.groups if snapshot else [])
        if not chosen or group.group_id in chosen
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
) -> DrillReport:
    """Two throwaway local clusters, realistic data, the full drill on local-folder storage;
    ``engine`` and ``mapping`` (its Spark master and settings) as a config file says them.

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
        return run_drill(
            config,
            work_dir=work_dir,
            report_path=report_path,
            progress=progress,
            stop=stop,
            notes=notes,
            metrics=metrics,
            access_proof=access_proof,
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
