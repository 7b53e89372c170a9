"""The three-phase restore: restore the data, move every group, verify it, then map and audit.

The order serves the recovery time (start to the last group committed): with
``three_phase.build_mapping: audit`` (the default) the groups move by the reset
stage's header search as soon as the data is back (on a repartitioned topic, one
search per source partition: ``merged-search``), and the Spark mapping, whose
start-up dominates small restores, runs afterwards as the audit that recounts
every committed position (:mod:`kbackup.app.audit`). ``always`` builds the
mapping first and places the groups from it, as before.

Each phase records its result in a state file as soon as it finishes. A run
that is interrupted anywhere and started again with the same config skips
the phases already recorded and redoes the interrupted one, which is safe
because every phase is idempotent: the restore continues from the progress
it committed on the target (exactly once), the mapping is a pure scan, and
executing the same reset plan again changes only the groups not moved yet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbackup.app.config import KBackupConfig
from kbackup.app.metrics import RecoveryMetrics
from kbackup.app.overrides import NO_BACKUP_ID, NO_TARGET_CLUSTER, spark_engine
from kbackup.app.position_check import check_positions
from kbackup.app.reset_request import plan_reset, restored_source_topics, source_offsets_for
from kbackup.app.three_phase_run import RunFiles, run_files
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.faults import crash_point
from kbackup.core.files import cannot_write, check_writable, write_file
from kbackup.core.kafka import open_admin
from kbackup.core.progress import Progress
from kbackup.format.reset_plan import read_plan, render_plan_table
from kbackup.format.three_phase_state import StateFile
from kbackup.reset import SourceOffsets, execute_plan

if TYPE_CHECKING:
    from kbackup.format.catalog import Backup


@dataclass
class PhaseResult:
    name: str
    seconds: float
    details: dict[str, Any]


@dataclass
class ThreePhaseSummary:
    run_key: str
    backup_id: str
    target_cluster_id: str | None
    phases: list[PhaseResult] = field(default_factory=list)
    #: Phases found already done in the state file (this run continued an earlier one).
    resumed_phases: list[str] = field(default_factory=list)
    state_file: str = ""
    #: Seconds from the start of this run until every group was committed (None: an earlier run
    #: committed them). The audit, if any, runs after.
    recovery_seconds: float | None = None
    #: Seconds from the start of this run to its end.
    total_seconds: float | None = None

    def phase(self, name: str) -> PhaseResult | None:
        return next((phase for phase in self.phases if phase.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "backup_id": self.backup_id,
            "target_cluster_id": self.target_cluster_id,
            "resumed_phases": self.resumed_phases,
            "state_file": self.state_file,
            "recovery_seconds": None if self.recovery_seconds is None else round(self.recovery_seconds, 3),
            "total_seconds": None if self.total_seconds is None else round(self.total_seconds, 3),
            "phases": {
                phase.name: {"seconds": round(phase.seconds, 3), **phase.details} for phase in self.phases
            },
        }


def require_origin_headers(
    config: KBackupConfig, command: str, backup_offset_headers: Callable[[], bool]
) -> KBackupConfig:
    """The config with origin headers on, or one ConfigError naming both keys.

    The mapping and the header-based reset find each group's position by the restored records'
    origin headers, so ``command`` refuses, before it changes anything, a restore that would write
    records without them. ``backup_offset_headers`` (the backup's ``include_offset_headers``) is
    asked only when ``restore.include_original_offset_header`` is unset. The returned config says
    true explicitly, so the restore, and the run key, do not depend on the backup's setting again.
    """
    chosen = config.restore.include_original_offset_header
    if chosen is None and not backup_offset_headers():
        why = "backup.include_offset_headers is false and restore.include_original_offset_header is unset"
    elif chosen is False:
        why = "restore.include_original_offset_header is false"
    else:
        restore = config.restore.model_copy(update={"include_original_offset_header": True})
        return config.model_copy(update={"restore": restore})
    raise ConfigError(
        f"{command} needs x-kafka-backup-* origin headers on the restored records, but {why}",
        hint="set restore.include_original_offset_header: true (it wins over backup.include_offset_headers; "
        "the backup keeps every origin offset either way)",
    )


def checked_backup_id(config: KBackupConfig) -> str:
    """The backup a three-phase restore restores; a UsageError when none is named."""
    if not config.backup_id:
        raise UsageError(NO_BACKUP_ID)
    return config.backup_id


def checked_inputs(config: KBackupConfig) -> tuple[KBackupConfig, KafkaConnection, str]:
    """The config with origin headers on, its target and backup id, before anything is read or
    written: a UsageError for one given nowhere, a ConfigError for a restore without origin headers."""
    if config.target is None:
        raise UsageError(NO_TARGET_CLUSTER)
    target, backup_id = config.target, checked_backup_id(config)
    config = require_origin_headers(config, "three-phase-restore", lambda: job_backup(config).offset_headers)
    return config, target, backup_id


#: How the run's own files are named in their errors: the folder the user chose holds them.
STATE_FILES = "three-phase-restore state file (three_phase.state_dir, --state-dir)"
STATE_FOLDER_HINT = "set three_phase.state_dir (or --state-dir) to a folder this user can write"


def _state_folder(path: Path) -> None:
    """The folder of a state file, made as the state file has always made it; one that cannot be
    made (a path through a file, no permission) is the user's to fix."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if isinstance(exc, FileExistsError):
            exc = NotADirectoryError(exc.errno, exc.strerror)  # named as the file in the way
        error = cannot_write(path, STATE_FILES, exc)
        error.hint = STATE_FOLDER_HINT
        raise error from None


def check_state_files(files: RunFiles) -> None:
    """Refuse now a state folder whose files (the phases' record, the reset plan, the mapping) could
    not be written after the restore's minutes: the run would stop with its work unrecorded."""
    _state_folder(files.state)
    for path in (files.state, files.reset_plan, files.mapping):
        try:
            check_writable(path, STATE_FILES)
        except ConfigError as error:
            error.hint = STATE_FOLDER_HINT
            raise


def three_phase_restore(
    config: KBackupConfig,
    *,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    metrics: RecoveryMetrics | None = None,
) -> ThreePhaseSummary:
    """Restore, map, move the groups and verify; ``stop`` (SIGINT/SIGTERM) ends the restore phase at
    its next safe point, and a re-run continues from there. ``metrics`` hears each phase start,
    the restore's progress, the recovery time and the audit's verdict (the caller says ``done``)."""
    run_started = time.monotonic()
    config, target, backup_id = checked_inputs(config)
    from kbackup.restore import service as restore_service

    cluster_id = open_admin(target).cluster_id()
    files = run_files(config, cluster_id)
    state = StateFile(files.state, files.run_key)  # an earlier run's record, read only
    summary = ThreePhaseSummary(
        run_key=files.run_key, backup_id=backup_id, target_cluster_id=cluster_id, state_file=str(state.path)
    )

    if state.done("reset") is None:
        # The groups' source offsets are found (or refused: a backup without a group snapshot, a
        # live source that is not the origin) before the restore writes anything, the state
        # folder included.
        source_offsets_for(config, config.offset_reset.groups)
    check_state_files(files)

    def phase_done(name: str) -> bool:
        if metrics is not None:
            metrics.phase(name)
        recorded = state.done(name)
        if recorded is None:
            return False
        details = {key: value for key, value in recorded.items() if key not in ("seconds", "finished_at")}
        summary.phases.append(PhaseResult(name, float(recorded.get("seconds", 0.0)), details))
        summary.resumed_phases.append(name)
        return True

    # First, when configured: the cluster metadata (ACLs, SCRAM users, configs), so that the
    # applications' principals can log in and act as soon as their data and groups are back.
    if config.restore_metadata.enabled and not phase_done("metadata"):
        from kbackup.app.metadata_request import metadata_phase

        started = time.monotonic()
        details = metadata_phase(config, files.metadata_plan)
        seconds = time.monotonic() - started
        state.record("metadata", seconds, details)
        summary.phases.append(PhaseResult("metadata", seconds, details))
        crash_point("three-phase:after-metadata")

    # Phase 1: the data, with origin headers (exactly once: a re-run continues from the target's progress).
    if not phase_done("restore"):
        started = time.monotonic()
        job = restore_service.prepare(
            backup_id=config.backup_id,
            storage=config.storage,
            target=target,
            settings=config.restore,
            metrics=metrics,
        )
        restored = restore_service.run(
            job, progress=progress, stop=stop, metrics=metrics, engine=spark_engine(config)
        )
        details = {
            "restore_id": restored.restore_id,
            "records": restored.records,
            "records_per_topic": {topic.target_topic: topic.records for topic in restored.topics},
            "filtered_per_topic": {
                topic.target_topic: {"dropped": topic.dropped, "tombstoned": topic.tombstoned}
                for topic in restored.topics
                if topic.dropped or topic.tombstoned
            },
            "created_topics": restored.created_topics,
            "compaction": [facts.to_dict() for facts in restored.compaction],
            "warnings": restored.warnings,
        }
        seconds = time.monotonic() - started
        state.record("restore", seconds, details)
        summary.phases.append(PhaseResult("restore", seconds, details))
    crash_point("three-phase:after-restore")

    backup = job_backup(config)
    target_topics = selected_target_topics(config, backup)
    audit = config.three_phase.build_mapping == "audit"
    # The audit order moves the groups first, also on a repartitioned topic (a search per source
    # partition); the mapping comes first where told to, or where an earlier run built it already
    # (the reset then reads it).
    mapping_first = not audit or (state.done("mapping") is not None and state.done("reset") is None)

    # Built where it is used: always and audit scan every restored topic; when-needed only a
    # repartitioned one.
    mapping_needed = config.three_phase.build_mapping in ("always", "audit") or repartitioned(
        config, backup, target_topics
    )

    def mapping_phase() -> None:
        if not phase_done("mapping"):
            started = time.monotonic()
            details = build_mapping_phase(
                config, backup, target_topics, files.mapping, mapping_needed, progress
            )
            seconds = time.monotonic() - started
            state.record("mapping", seconds, details)
            summary.phases.append(PhaseResult("mapping", seconds, details))
        crash_point("three-phase:after-mapping")

    # Phase 2: the exact source-to-target ranges (Spark), where the reset needs them.
    if mapping_first:
        mapping_phase()

    # Phase 3: plan and execute the groups' new offsets (a re-run skips groups already moved).
    plan_path = files.reset_plan
    if not phase_done("reset"):
        started = time.monotonic()
        # reset_request finds the mapping this run wrote (files.mapping), as offset-reset plan does.
        plan = plan_reset(
            config,
            group_prefix=config.three_phase.group_prefix,
            progress=progress,
            search_repartitioned=audit,
        )
        write_file(plan_path, plan.to_json_bytes(), STATE_FILES)
        crash_point("three-phase:after-plan")
        result = execute_plan(plan, target, snapshot_dir=Path(config.offset_reset.snapshot_dir))
        totals = plan.totals()
        details = {
            "plan": str(plan_path),
            "groups": totals["groups"],
            "partitions": totals["partitions"],
            "offsets_changed": len(result.changes),
            "already_applied": result.already_applied,
            "records_reread": totals["rereads"],
            "unknown_rereads": totals["unknown_rereads"],
            "recovery_gap": totals["recovery_gap"],
            "retention_gap": totals["retention_gap"],
            "rollback_snapshot": result.snapshot_path,
        }
        seconds = time.monotonic() - started
        state.record("reset", seconds, details)
        summary.phases.append(PhaseResult("reset", seconds, details))
        # The recovery time: from the start of this run until every group is committed.
        summary.recovery_seconds = time.monotonic() - run_started
        if metrics is not None:
            metrics.groups_committed(summary.recovery_seconds)

    # Verify: every moved group's position, judged from the records around it on the target (not
    # from the plan's answer); a wrong position, an unverifiable one or a recovery gap fails the run
    # before the phase is recorded, so a re-run verifies again.
    if not phase_done("verify"):
        started = time.monotonic()
        plan = read_plan(plan_path)
        check = check_positions(
            target,
            plan,
            strategy=config.offset_reset.strategy,
            backup_end={key: item.end_offset for key, item in backup.coverage().items()},
        )
        check.raise_for(accept_gap=config.three_phase.accept_gap)
        details = check.details()
        crash_point("three-phase:verified")
        seconds = time.monotonic() - started
        state.record("verify", seconds, details)
        summary.phases.append(PhaseResult("verify", seconds, details))

    # The audit: the full mapping (built now, unless the reset needed it first) recounts every
    # committed position; a disagreement fails the run before the phase is recorded.
    if audit:
        crash_point("three-phase:before-audit")
        if not mapping_first:  # else the reset needed it first, and the audit reads the same file
            mapping_phase()
        if not phase_done("audit"):
            started = time.monotonic()
            from kbackup.app.audit import audit_positions
            from kbackup.format.mapping_file import read_mapping

            plan = read_plan(plan_path)
            audited = audit_positions(plan, read_mapping(files.mapping))
            if metrics is not None:
                metrics.audited(len(audited.disagreements))
            audited.raise_for_disagreement()
            details = audited.details()
            seconds = time.monotonic() - started
            state.record("audit", seconds, details)
            summary.phases.append(PhaseResult("audit", seconds, details))
    summary.total_seconds = time.monotonic() - run_started
    return summary


@dataclass
class PhasePreview:
    """What one phase would do, as lines to print and as details for --json."""

    name: str
    lines: list[str]
    details: dict[str, Any]


@dataclass
class ThreePhaseDryRun:
    run_key: str
    state_file: str
    phases: list[PhasePreview]

    def lines(self) -> list[str]:
        lines = [
            f"dry run: nothing is created, written or committed (state file {self.state_file} stays as it is)"
        ]
        for phase in self.phases:
            lines.append(f"{phase.name}:")
            lines.extend(f"  {line}" for line in phase.lines)
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "run_key": self.run_key,
            "state_file": self.state_file,
            "phases": {phase.name: phase.details for phase in self.phases},
        }


def three_phase_dry_run(config: KBackupConfig) -> ThreePhaseDryRun:
    """Each phase's plan as a run would make it now, and the phases an earlier run finished; refuses
    what the run would refuse. Reads the backup and the target; writes no state, mapping, plan or
    snapshot file, and changes nothing on the target."""
    config, target, _ = checked_inputs(config)
    from kbackup.restore import service as restore_service

    files = run_files(config, open_admin(target).cluster_id())
    state = StateFile(files.state, files.run_key)
    job = restore_service.prepare(
        backup_id=config.backup_id, storage=config.storage, target=target, settings=config.restore
    )
    topics = job.plan.topics
    target_topics = sorted({topic.target_topic for topic in topics})
    missing = sorted(topic.target_topic for topic in topics if topic.create)
    repartitioned_topics = sorted(
        topic.target_topic for topic in topics if topic.source_partitions != topic.target_partitions
    )

    def earlier(name: str) -> PhasePreview | None:
        recorded = state.done(name)
        if recorded is None:
            return None
        shown = ", ".join(f"{key} {value}" for key, value in recorded.items() if not isinstance(value, dict))
        return PhasePreview(name, [f"done in an earlier run, skipped: {shown}"], {"done": recorded})

    restore = earlier("restore")
    records_left: int | None = 0
    if restore is None:
        report = restore_service.dry_run(job, on_spark=config.engine == "spark")
        records_left = report.records_to_write if report.records_to_write is not None else None
        lines = report.lines()
        if lines and lines[0].startswith("dry run"):  # the banner, printed once above
            lines = lines[1:]
        restore = PhasePreview("restore", [line.removeprefix("  ") for line in lines], report.to_dict())
    mapping = earlier("mapping") or preview_mapping(
        config, target, files.mapping, target_topics, missing, repartitioned_topics, records_left
    )
    reset = earlier("reset")
    if reset is None:
        source, backup, _ = source_offsets_for(config, config.offset_reset.groups)
        restored = restored_source_topics(config, backup)
        groups = [
            group
            for group in config.offset_reset.groups or sorted(source.groups)
            if restored is None or any(topic in restored for topic, _ in source.groups.get(group, {}))
        ]
        reset = preview_reset(config, files, source, groups, missing, repartitioned_topics, records_left)
    verify = earlier("verify") or PhasePreview(
        "verify",
        ["would read back every moved group's committed offset and the record at it"],
        {"done": None},
    )
    phases = [restore, mapping, reset, verify]
    if config.restore_metadata.enabled:
        phases.insert(0, earlier("metadata") or preview_metadata(config))
    return ThreePhaseDryRun(files.run_key, str(files.state), phases)


def preview_metadata(config: KBackupConfig) -> PhasePreview:
    """The metadata phase's plan as it would be made now (planning changes nothing)."""
    from kbackup.app.metadata_request import plan_metadata
    from kbackup.format.metadata_plan import render_metadata_plan

    plan = plan_metadata(config)
    return PhasePreview("metadata", render_metadata_plan(plan).splitlines(), plan.model_dump(mode="json"))


def preview_mapping(
    config: KBackupConfig,
    target: KafkaConnection,
    path: Path,
    target_topics: list[str],
    missing: list[str],
    repartitioned_topics: list[str],
    records_left: int | None,
) -> PhasePreview:
    mode = config.three_phase.build_mapping
    always = mode in ("always", "audit")
    details: dict[str, Any] = {"done": None, "build": always or bool(repartitioned_topics), "file": None}
    if not details["build"]:
        return PhasePreview(
            "mapping",
            ["not built: no topic is repartitioned (three_phase.build_mapping: when-needed); the reset "
             "finds each position by binary search over the origin headers"],
            details,
        )  # fmt: skip
    from kbackup.mapping import plan_scan

    if mode == "audit":
        why = "three_phase.build_mapping: audit; after the groups move, as the audit of their positions"
    elif repartitioned_topics:
        why = f"repartitioned: {', '.join(repartitioned_topics)}; before the groups move"
    else:
        why = "three_phase.build_mapping: always; before the groups move"
    details.update(file=str(path), topics=target_topics, reason=why)
    lines = [f"would scan {', '.join(target_topics)} with Spark ({why}) and write {path}"]
    if missing:
        lines.append(f"{', '.join(missing)}: not on the target yet (the restore creates them)")
    else:
        scan = plan_scan(target, target_topics)
        details["scan"] = {"partitions": len(scan.partitions), "offsets_now": scan.offsets}
        more = "" if records_left == 0 else ", and what the restore writes first"
        lines.append(f"{len(scan.partitions)} partition(s) holding {scan.offsets:,} offset(s) now{more}")
    return PhasePreview("mapping", lines, details)


def preview_reset(
    config: KBackupConfig,
    files: RunFiles,
    source: SourceOffsets,
    groups: list[str],
    missing: list[str],
    repartitioned_topics: list[str],
    records_left: int | None,
) -> PhasePreview:
    details: dict[str, Any] = {"done": None, "file": str(files.reset_plan), "plan": None}
    after = ""
    if missing:
        after = (
            f"{', '.join(missing)} do not exist on the target yet (the restore creates them): "
            "there is nothing to plan against before the restore"
        )
    elif (
        repartitioned_topics
        and config.three_phase.build_mapping != "audit"
        and not files.mapping.exists()
        and not config.offset_reset.mapping_file
    ):
        after = (
            f"{', '.join(repartitioned_topics)} are repartitioned: their positions come from the "
            "mapping, which is built after the restore"
        )
    if after:
        details["planned_after"] = "restore" if missing else "mapping"
        prefix = config.three_phase.group_prefix
        moved = f" as {prefix}<group>" if prefix else ""
        return PhasePreview(
            "reset",
            [
                f"planned during the run: {after}",
                f"would move {len(groups)} group(s){moved} from the source offsets of the "
                f"{source.info.kind} taken {source.info.taken_at}",
            ],
            details,
        )
    plan = plan_reset(
        config,
        group_prefix=config.three_phase.group_prefix,
        search_repartitioned=config.three_phase.build_mapping == "audit",
    )
    details["plan"] = plan.model_dump(mode="json")
    totals = plan.totals()
    lines = render_plan_table(plan).splitlines()
    if records_left != 0:
        left = "more record(s)" if records_left is None else f"{records_left:,} more record(s)"
        lines.append(
            f"planned on the target as it is now: the restore writes {left} first, and the run plans again"
        )
    lines.append(
        f"would write the plan to {files.reset_plan} and a rollback snapshot to "
        f"{config.offset_reset.snapshot_dir}/, then commit {totals['changes']} offset(s)"
    )
    return PhasePreview("reset", lines, details)


def job_backup(config: KBackupConfig) -> Backup:
    from kbackup.format.catalog import BackupCatalog
    from kbackup.storage import open_storage

    assert config.backup_id is not None
    return BackupCatalog(open_storage(config.storage)).load(config.backup_id)


def selected_target_topics(config: KBackupConfig, backup: Any) -> list[str]:
    from kbackup.restore.plan import restored_topics

    return sorted({item.target_topic for item in restored_topics(backup, config.restore)})


def build_mapping_phase(
    config: KBackupConfig,
    backup: Any,
    target_topics: list[str],
    path: Path,
    needed: bool,
    progress: Progress | None = None,
) -> dict[str, Any]:
    if not needed:
        return {"built": False, "reason": "no topic was repartitioned"}
    from kbackup.format.mapping_file import write_mapping
    from kbackup.mapping import build_offset_mapping

    assert config.target is not None
    mapping = build_offset_mapping(
        config.target,
        source_cluster=backup.source_cluster,
        topics=target_topics,
        settings=config.mapping,
        progress=progress,
    )
    crash_point("three-phase:mapping-scanned")
    _state_folder(path)
    size = write_mapping(mapping, path, "json", what=STATE_FILES)
    return {
        "built": True,
        "file": str(path),
        "ranges": len(mapping.ranges),
        "records": mapping.records,
        "bytes": size,
    }


def repartitioned(config: KBackupConfig, backup: Any, target_topics: list[str]) -> bool:
    """Whether any restored topic has a partition count other than its source's."""
    assert config.target is not None
    counts = open_admin(config.target).partition_counts(target_topics)
    mapping = config.restore.topic_mapping
    return any(
        counts.get(mapping.get(name, name), entry.partitions) != entry.partitions
        for name, entry in backup.topics.items()
    )
