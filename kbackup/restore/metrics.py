"""The metrics of a restore (docs/observability.md, "Metrics of a restore"): what it produced and
what landed per target topic, its transactions and its phases; served and written by
kbackup.core.metrics, with the health and the request counts every run has. The runs around a
restore (three-phase-restore, drill) add theirs in kbackup.app.metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from kbackup import __version__
from kbackup.core.metrics import MetricDeclaration, RunMetrics, RunTiming, declare_metrics

#: The phases of a ``restore`` run, in order; ``done`` once the run ended well.
RESTORE_RUN_PHASES = ("restore", "done")

#: A restore's own metrics, in the order of the exposition.
RESTORE_METRICS = {
    "info": MetricDeclaration(
        "kafka_backup_restore",
        "info",
        "The restore this process runs: its backup id, command and kafka-backup version.",
    ),
    "records": MetricDeclaration(
        "kafka_backup_restore_records",
        "counter",
        "Records produced into the target topic by this run.",
        ("topic",),
    ),
    "bytes": MetricDeclaration(
        "kafka_backup_restore_bytes",
        "counter",
        "Key and value bytes of the records produced into the target topic by this run.",
        ("topic",),
    ),
    "filtered": MetricDeclaration(
        "kafka_backup_restore_filtered_records",
        "counter",
        "Records of the selection that a rule of restore.filters dropped (action drop, not produced) "
        "or restored as tombstones (action tombstone, produced with a null value), per target topic.",
        ("topic", "action"),
    ),
    "landed": MetricDeclaration(
        "kafka_backup_restore_landed_records",
        "gauge",
        "Records of the restore on the target topic: produced by this run, by earlier runs of the "
        "same restore, or found already there.",
        ("topic",),
    ),
    "planned": MetricDeclaration(
        "kafka_backup_restore_planned_records",
        "gauge",
        "Records the restore puts on the target topic in all (absent where segments were not counted).",
        ("topic",),
    ),
    "transactions": MetricDeclaration(
        "kafka_backup_restore_transactions",
        "counter",
        "Transactions this run committed on the target (exactly-once mode).",
    ),
    "phase": MetricDeclaration(
        "kafka_backup_restore_phase",
        "gauge",
        "1 for the phase the run is in (done: it ended well), 0 for the others.",
        ("phase",),
    ),
    "phase_seconds": MetricDeclaration(
        "kafka_backup_restore_phase_duration_seconds",
        "gauge",
        "How long each phase of this run took (a phase done by an earlier run: 0).",
        ("phase",),
    ),
    "rate_limit": MetricDeclaration(
        "kafka_backup_restore_rate_limit",
        "gauge",
        "The produce's rate limit as set for this run, by unit: bytes (restore.max_bytes_per_second) "
        "or records (restore.max_records_per_second) a second (absent: no limit).",
        ("unit",),
    ),
    "throttled": MetricDeclaration(
        "kafka_backup_restore_throttled_seconds",
        "counter",
        "Seconds the produce waited on its rate limits (on Spark: the tasks' waits added up).",
    ),
}


@dataclass
class _TopicRestore:
    records: Any
    bytes: Any
    landed: Any
    landed_count: int = 0


class RestoreMetrics(RunMetrics):
    """The metrics of one restore, and its health: what it produced and what landed per target
    topic, its transactions, and the phase the run is in (``phases``, in the order the run goes
    through them; ``command``: the command that runs it, for the info metric).

    ``/healthz`` watches the loop that produces records while it runs (the restore phase); the
    other phases are bounded steps with their own timeouts, and answer alive. ``/readyz`` asks
    for answers from the target cluster and the storage.
    """

    def __init__(
        self,
        backup_id: str,
        *,
        command: str = "restore",
        phases: tuple[str, ...] = RESTORE_RUN_PHASES,
        **timing: Unpack[RunTiming],
    ) -> None:
        super().__init__(backup_id, cluster="target", **timing)
        self.phases = phases
        declared = declare_metrics(self.registry, RESTORE_METRICS)
        declared["info"].labels(backup_id).info({"command": command, "version": __version__})
        self._records = declared["records"]
        self._bytes = declared["bytes"]
        self._filtered = declared["filtered"]
        self._landed = declared["landed"]
        self._planned = declared["planned"]
        self._transactions = declared["transactions"].labels(backup_id)
        self._phase = declared["phase"]
        self._phase_seconds = declared["phase_seconds"]
        for phase in self.phases:
            self._phase.labels(backup_id, phase).set(0)
        self._rate_limit = declared["rate_limit"]
        self._throttled = declared["throttled"].labels(backup_id)
        self._topics: dict[str, _TopicRestore] = {}
        self.current_phase: str | None = None
        self._phase_started = self._clock()
        self.health.unwatched_because = "no phase started yet"

    # -- phases --------------------------------------------------------------------------------------

    def phase(self, name: str) -> None:
        """The run enters phase ``name`` (one of ``self.phases``); the textfile is written."""
        now = self._clock()
        if self.current_phase is not None:
            self._phase_seconds.labels(self.backup_id, self.current_phase).set(now - self._phase_started)
            self._phase.labels(self.backup_id, self.current_phase).set(0)
        self._phase.labels(self.backup_id, name).set(1)
        self.current_phase, self._phase_started = name, now
        self.health.turned(progressed=True)
        self.health.unwatched_because = "the run ended" if name == "done" else f"in the {name} phase"
        self.after_checkpoint()

    # -- producing (the restore loop) ----------------------------------------------------------------

    def _topic(self, topic: str) -> _TopicRestore:
        found = self._topics.get(topic)
        if found is None:
            labels = (self.backup_id, topic)
            found = self._topics[topic] = _TopicRestore(
                self._records.labels(*labels), self._bytes.labels(*labels), self._landed.labels(*labels)
            )
        return found

    def restore_planned(self, topic: str, *, planned: int | None, landed: int) -> None:
        """Before producing: the target topic's records in all (None: not counted), and how many of
        them earlier runs put there."""
        if planned is not None:
            self._planned.labels(self.backup_id, topic).set(planned)
        found = self._topic(topic)
        found.landed_count = landed
        found.landed.set(landed)

    def producing(self, running: bool) -> None:
        """The produce loop starts (watched by ``/healthz``) or ends."""
        self.health.turned(progressed=True)
        self.health.unwatched_because = None if running else f"in the {self.current_phase} phase"

    def records_produced(self, topic: str, count: int, size_bytes: int) -> None:
        """One batch of records went to the target topic's producer."""
        found = self._topic(topic)
        found.records.inc(count)
        found.bytes.inc(size_bytes)
        found.landed_count += count
        found.landed.set(found.landed_count)
        self.health.turned(progressed=count > 0)

    def records_filtered(self, topic: str, *, dropped: int, tombstoned: int) -> None:
        """Records of a batch the filter rules dropped or made tombstones."""
        for action, count in (("drop", dropped), ("tombstone", tombstoned)):
            if count:
                self._filtered.labels(self.backup_id, topic, action).inc(count)

    def rate_limited(self, *, bytes_per_second: float | None, records_per_second: float | None) -> None:
        """The run's rate limits, set once before it produces."""
        for unit, rate in (("bytes", bytes_per_second), ("records", records_per_second)):
            if rate is not None:
                self._rate_limit.labels(self.backup_id, unit).set(rate)

    def throttled(self, seconds: float) -> None:
        """The produce waited ``seconds`` on its rate limits."""
        self._throttled.inc(seconds)

    def records_already_landed(self, topic: str, count: int) -> None:
        """Records of a batch found already on the target (an idempotent run resumed)."""
        found = self._topic(topic)
        found.landed_count += count
        found.landed.set(found.landed_count)

    def transaction_committed(self, count: int = 1) -> None:
        """``count`` transactions committed (more than one: a unit's, told when it is done)."""
        self._transactions.inc(count)
        if count:
            self.health.source_answered()
