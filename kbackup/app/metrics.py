"""The metrics of the commands that restore (docs/observability.md, "Metrics of a restore, a
three-phase restore and a drill"): a restore's (kbackup.restore.metrics), the phases of the run
around it, and the gauges of those phases: the recovery time, the audit, the drill's proof."""

from __future__ import annotations

from typing import Unpack

from kbackup.core.metrics import MetricDeclaration, RunTiming, declare_metrics
from kbackup.restore import RESTORE_RUN_PHASES, RestoreMetrics

#: The phases of each restore command, in the order a run goes through them with the default
#: ``three_phase.build_mapping: audit`` (docs/observability.md); ``done`` once the run ended well.
RESTORE_PHASES = {
    "restore": RESTORE_RUN_PHASES,
    "three-phase-restore": ("metadata", "restore", "reset", "verify", "mapping", "audit", "done"),
    "drill": ("backup", "metadata", "restore", "reset", "verify", "mapping", "audit", "proof", "done"),
}

#: The gauges of the phases around a restore, in the order of the exposition.
RECOVERY_METRICS = {
    "recovery": MetricDeclaration(
        "kafka_backup_recovery_seconds",
        "gauge",
        "Seconds from the start of the run until every consumer group was committed on the target.",
    ),
    "disagreements": MetricDeclaration(
        "kafka_backup_audit_disagreements",
        "gauge",
        "Committed group positions the audit (the full offset mapping) disagrees with; 0: it agrees.",
    ),
    "skipped": MetricDeclaration(
        "kafka_backup_drill_skipped_records",
        "gauge",
        "Records the drill's groups would skip after the restore; 0: the drill passed.",
    ),
}


class RecoveryMetrics(RestoreMetrics):
    """The metrics of one ``restore``, ``three-phase-restore`` or ``drill`` run, and its health:
    the restore's, in the phases of ``command``, with the recovery time, the audit's
    disagreements and the drill's skipped records (each set by the phase that finds it)."""

    def __init__(self, backup_id: str, *, command: str, **timing: Unpack[RunTiming]) -> None:
        super().__init__(backup_id, command=command, phases=RESTORE_PHASES[command], **timing)
        declared = declare_metrics(self.registry, RECOVERY_METRICS)
        self._recovery = declared["recovery"]
        self._disagreements = declared["disagreements"]
        self._skipped = declared["skipped"]

    def groups_committed(self, recovery_secs: float) -> None:
        self._recovery.labels(self.backup_id).set(recovery_secs)

    def audited(self, disagreements: int) -> None:
        self._disagreements.labels(self.backup_id).set(disagreements)

    def drill_proved(self, skipped: int) -> None:
        self._skipped.labels(self.backup_id).set(skipped)
