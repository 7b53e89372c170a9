"""The three-phase restore: restore the data, build the offset mapping, move every group, then verify.

Each phase records its result in a state file as soon as it finishes. A run
that is interrupted anywhere and started again with the same config skips
the phases already recorded and redoes the interrupted one, which is safe
because every phase is idempotent: the restore continues from the progress
it committed on the target (exactly once), the mapping is a pure scan, and
executing the same reset plan again changes only the groups not moved yet.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.app.config import KBackupConfig
from kbackup.app.reset_request import plan_reset
from kbackup.core.errors import ConfigError, VerificationError
from kbackup.core.faults import crash_point
from kbackup.core.kafka import KafkaClients, PartitionReader, open_admin
from kbackup.core.progress import Progress
from kbackup.format.reset_plan import ResetPlan
from kbackup.format.three_phase_state import StateFile
from kbackup.reset.executor import execute_plan
from kbackup.reset.planner import MappingIndex
from kbackup.reset.probe import PartitionProbe, probe_consumer_properties

PHASES = ("restore", "mapping", "reset", "verify")


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

    def phase(self, name: str) -> PhaseResult | None:
        return next((phase for phase in self.phases if phase.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "backup_id": self.backup_id,
            "target_cluster_id": self.target_cluster_id,
            "resumed_phases": self.resumed_phases,
            "state_file": self.state_file,
            "phases": {
                phase.name: {"seconds": round(phase.seconds, 3), **phase.details} for phase in self.phases
            },
        }


def run_key_of(config: KBackupConfig, target_cluster_id: str | None) -> str:
    """Same backup, target and settings: same key, so a re-run finds its state."""
    identity = {
        "backup_id": config.backup_id,
        "storage": config.storage.resolved_url(),
        "target": target_cluster_id,
        "restore": config.restore.model_dump(mode="json"),
        "offset_reset": config.offset_reset.model_dump(mode="json", exclude={"snapshot_dir"}),
        "group_prefix": config.three_phase.group_prefix,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return f"{config.backup_id}-{digest}"


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


def three_phase_restore(
    config: KBackupConfig, *, progress: Progress | None = None, stop: threading.Event | None = None
) -> ThreePhaseSummary:
    """Restore, map, move the groups and verify; ``stop`` (SIGINT/SIGTERM) ends the restore phase at
    its next safe point, and a re-run continues from there."""
    if config.target is None:
        raise ConfigError("three-phase-restore needs a 'target' section")
    if not config.backup_id:
        raise ConfigError("three-phase-restore needs backup_id")
    target, backup_id = config.target, config.backup_id
    config = require_origin_headers(config, "three-phase-restore", lambda: job_backup(config).offset_headers)
    from kbackup.restore import service as restore_service

    cluster_id = open_admin(target).cluster_id()
    run_key = run_key_of(config, cluster_id)
    state_dir = Path(config.three_phase.state_dir)
    state = StateFile(state_dir / f"{run_key}.json", run_key)
    summary = ThreePhaseSummary(
        run_key=run_key, backup_id=backup_id, target_cluster_id=cluster_id, state_file=str(state.path)
    )

    def phase_done(name: str) -> bool:
        recorded = state.done(name)
        if recorded is None:
            return False
        details = {key: value for key, value in recorded.items() if key not in ("seconds", "finished_at")}
        summary.phases.append(PhaseResult(name, float(recorded.get("seconds", 0.0)), details))
        summary.resumed_phases.append(name)
        return True

    # Phase 1: the data, with origin headers (exactly once: a re-run continues from the target's progress).
    if not phase_done("restore"):
        started = time.monotonic()
        job = restore_service.prepare(
            backup_id=config.backup_id, storage=config.storage, target=target, settings=config.restore
        )
        restored = restore_service.run(job, progress=progress, stop=stop)
        details = {
            "restore_id": restored.restore_id,
            "records": restored.records,
            "records_per_topic": {topic.target_topic: topic.records for topic in restored.topics},
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

    # Phase 2: the exact source-to-target ranges (Spark).
    mapping_path = state_dir / f"{run_key}-mapping.json"
    if not phase_done("mapping"):
        started = time.monotonic()
        details = build_mapping_phase(config, backup, target_topics, mapping_path, progress)
        seconds = time.monotonic() - started
        state.record("mapping", seconds, details)
        summary.phases.append(PhaseResult("mapping", seconds, details))
    crash_point("three-phase:after-mapping")

    # Phase 3: plan and execute the groups' new offsets (a re-run skips groups already moved).
    plan_path = state_dir / f"{run_key}-reset-plan.json"
    if not phase_done("reset"):
        started = time.monotonic()
        plan = plan_reset(
            config,
            mapping=load_index(mapping_path, backup.source_cluster),
            group_prefix=config.three_phase.group_prefix,
            progress=progress,
        )
        plan_path.write_bytes(plan.to_json_bytes())
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
            "rollback_snapshot": result.snapshot_path,
        }
        seconds = time.monotonic() - started
        state.record("reset", seconds, details)
        summary.phases.append(PhaseResult("reset", seconds, details))

    # Verify: every moved group's committed offset, and the record there is the one expected.
    if not phase_done("verify"):
        started = time.monotonic()
        plan = ResetPlan.model_validate_json(plan_path.read_text())
        details = verify_plan_applied(config, plan)
        crash_point("three-phase:verified")
        seconds = time.monotonic() - started
        state.record("verify", seconds, details)
        summary.phases.append(PhaseResult("verify", seconds, details))
    return summary


def job_backup(config: KBackupConfig) -> Any:
    from kbackup.format.catalog import BackupCatalog
    from kbackup.storage import open_storage

    assert config.backup_id is not None
    return BackupCatalog(open_storage(config.storage)).load(config.backup_id)


def selected_target_topics(config: KBackupConfig, backup: Any) -> list[str]:
    from kbackup.restore.plan import select_topics

    return sorted({item.target_topic for item in select_topics(backup, config.restore)})


def build_mapping_phase(
    config: KBackupConfig, backup: Any, target_topics: list[str], path: Path, progress: Progress | None = None
) -> dict[str, Any]:
    needed = config.three_phase.build_mapping == "always" or repartitioned(config, backup, target_topics)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    size = write_mapping(mapping, path, "json")
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


def load_index(path: Path, source_cluster: str) -> MappingIndex | None:
    if not path.exists():
        return None
    from kbackup.reset.mapping_input import load_mapping_index

    return load_mapping_index(path, source_cluster)


def verify_plan_applied(config: KBackupConfig, plan: ResetPlan) -> dict[str, Any]:
    """Committed offsets equal the plan, and each position holds the record with the expected origin."""
    assert config.target is not None
    admin = open_admin(config.target)
    clients = KafkaClients(config.target, client_id="kafka-backup-verify")
    # The planner's probe settings (read_committed, no read-ahead, no long polls at the end).
    reader = PartitionReader(clients, properties=probe_consumer_properties())
    problems: list[str] = []
    checked = 0
    ends = {(item.topic, item.partition): item.log_end for item in plan.target_partitions}
    try:
        for group in plan.groups:
            committed = admin.committed_offsets(group.group_id)
            for row in group.partitions:
                if row.new_offset is None:
                    continue
                key = (row.target_topic, row.target_partition)
                checked += 1
                if committed.get(key) != row.new_offset:
                    problems.append(f"{group.group_id} {key[0]}/{key[1]}: committed {committed.get(key)}")
                    continue
                if row.expected_origin is None:
                    continue
                probe = PartitionProbe(
                    reader,
                    topic=key[0],
                    partition=key[1],
                    source_cluster=plan.source.source_cluster,
                    end_offset=ends[key],
                )
                found = probe.first_at_or_after(
                    row.new_offset, row.expected_origin.topic, row.expected_origin.partition
                )
                if (
                    found is None
                    or found.target_offset != row.new_offset
                    or (found.source_offset != row.expected_origin.offset)
                ):
                    problems.append(
                        f"{group.group_id} {key[0]}/{key[1]}: the record at {row.new_offset} is not "
                        f"{row.expected_origin.topic}/{row.expected_origin.partition}@{row.expected_origin.offset}"
                    )
    finally:
        reader.close()
    if problems:
        raise VerificationError("three-phase restore verification failed:\n  " + "\n  ".join(problems))
    return {"positions_checked": checked, "problems": 0}
