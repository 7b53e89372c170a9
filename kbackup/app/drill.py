"""The disaster-recovery drill: back up, restore under a drill prefix, map, move copies of the groups,
and prove that no group would skip a record it had not processed on the source.

``run_drill`` works on any two clusters (CI pipelines run it on a schedule);
``run_local_drill`` starts two throwaway local clusters, fills the source with
realistic data (see :mod:`kbackup.app.drill_data`) and runs the same drill.
"""

from __future__ import annotations

import html
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbackup.app.config import KBackupConfig
from kbackup.app.drill_proof import Verification, verify_positions
from kbackup.app.settings import DrillSettings, ThreePhaseSettings
from kbackup.app.three_phase import (
    ThreePhaseSummary,
    job_backup,
    require_origin_headers,
    three_phase_restore,
)
from kbackup.backup.settings import SourceSettings, TopicSelection
from kbackup.core.config import StorageSettings
from kbackup.core.errors import ConfigError, InterruptedByUser
from kbackup.core.kafka import open_admin
from kbackup.core.progress import Progress
from kbackup.format.manifest import utc_now_iso
from kbackup.reset.settings import OffsetResetSettings


@dataclass
class DrillReport:
    started_at: str
    backup_id: str
    source_cluster: str
    phase_seconds: dict[str, float] = field(default_factory=dict)
    backup: dict[str, Any] = field(default_factory=dict)
    three_phase: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    reprocessed: int = 0

    @property
    def passed(self) -> bool:
        return self.skipped == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "started_at": self.started_at,
            "backup_id": self.backup_id,
            "source_cluster": self.source_cluster,
            "records_skipped": self.skipped,
            "records_reprocessed": self.reprocessed,
            "phase_seconds": {name: round(value, 2) for name, value in self.phase_seconds.items()},
            "groups": self.groups,
            "partitions": self.partitions,
            "backup": self.backup,
            "three_phase": self.three_phase,
        }

    def summary_lines(self) -> list[str]:
        verdict = "PASSED" if self.passed else "FAILED: records would be skipped"
        lines = [
            f"drill {verdict}: {len(self.groups)} group(s), {len(self.partitions)} partition(s), "
            f"{self.skipped} record(s) skipped, {self.reprocessed} re-read",
            "phases: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phase_seconds.items()),
        ]
        for group, totals in sorted(self.groups.items()):
            lines.append(
                f"  {group:<40} partitions {totals['partitions']:>3}  skipped {totals['skipped']:>6}  "
                f"re-read {totals['reprocessed']:>6}"
            )
        return lines


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


def run_drill(
    config: KBackupConfig,
    *,
    work_dir: Path,
    report_path: Path,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> DrillReport:
    # Refused before the backup: the drill restores the backup it takes, with this config's
    # backup.include_offset_headers.
    backed_up_with_headers = config.backup.include_offset_headers
    config = require_origin_headers(config, "drill", lambda: backed_up_with_headers)
    if config.source is None or config.target is None:
        raise ConfigError("a drill needs 'source' and 'target' sections")
    from kbackup.backup.runner import BackupJob, run_backup

    backup_id = config.backup_id or f"drill-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    report = DrillReport(started_at=utc_now_iso(), backup_id=backup_id, source_cluster="")

    started = time.monotonic()
    backed_up = run_backup(
        BackupJob(backup_id=backup_id, source=config.source, storage=config.storage, settings=config.backup),
        progress=progress,
        stop=stop,
    )
    if stop is not None and stop.is_set():
        raise InterruptedByUser("drill stopped by a signal during its backup; nothing was restored")
    report.phase_seconds["backup"] = time.monotonic() - started
    report.backup = backed_up.to_dict()
    report.source_cluster = backed_up.source_cluster_id

    restore_config = drill_config(config, backup_id, backed_up.topics, work_dir)
    summary: ThreePhaseSummary = three_phase_restore(restore_config, progress=progress, stop=stop)
    for phase in summary.phases:
        report.phase_seconds[phase.name] = phase.seconds
    report.three_phase = summary.to_dict()

    started = time.monotonic()
    verification = prove(restore_config)
    report.phase_seconds["proof"] = time.monotonic() - started
    report.groups = verification.per_group()
    report.partitions = [verdict.__dict__ for verdict in verification.verdicts]
    report.skipped, report.reprocessed = verification.skipped, verification.reprocessed
    write_report(report, report_path)
    return report


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


def write_report(report: DrillReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    path.with_suffix(".html").write_text(render_html(report))


def _bars(title: str, values: dict[str, float], unit: str) -> str:
    width, row = 560, 22
    peak = max(values.values(), default=0) or 1
    rows = []
    for index, (name, value) in enumerate(values.items()):
        y = 24 + index * row
        length = 0 if value <= 0 else max(2, int(value / peak * (width - 260)))
        rows.append(
            f'<text x="0" y="{y + 14}" font-size="12">{html.escape(name)}</text>'
            f'<rect x="250" y="{y}" width="{length}" height="16" fill="#3b7dd8"/>'
            f'<text x="{256 + length}" y="{y + 13}" font-size="12">{value:g} {unit}</text>'
        )
    height = 30 + len(values) * row
    return (
        f'<h2>{html.escape(title)}</h2><svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}">{"".join(rows)}</svg>'
    )


def render_html(report: DrillReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in report.summary_lines())
    rereads = {group: float(totals["reprocessed"]) for group, totals in sorted(report.groups.items())}
    skips = {group: float(totals["skipped"]) for group, totals in sorted(report.groups.items())}
    phases = {name: round(seconds, 1) for name, seconds in report.phase_seconds.items()}
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>kafka-backup drill</title></head>"
        f"<body style='font-family:sans-serif'><h1>Disaster-recovery drill {verdict}</h1><ul>{lines}</ul>"
        + _bars("Records skipped per group (must be 0)", skips, "records")
        + _bars("Records re-read per group", rereads, "records")
        + _bars("Time per phase", phases, "s")
        + "</body></html>\n"
    )


def run_local_drill(
    *,
    report_path: Path,
    records_per_partition: int = 2_000,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> DrillReport:
    """Two throwaway local clusters, realistic data, the full drill on local-folder storage."""
    from kbackup.app.drill_data import fill_source
    from kbackup.sandbox.kafka import local_clusters

    with (
        tempfile.TemporaryDirectory(prefix="kbackup-drill-") as scratch,
        local_clusters(["source", "target"], Path(scratch) / "clusters") as (source, target),
    ):
        data = fill_source(source.connection(), records_per_partition=records_per_partition)
        work_dir = Path(scratch)
        config = KBackupConfig(
            backup_id="local-drill",
            source=SourceSettings(
                bootstrap_servers=[source.bootstrap_servers],
                topics=TopicSelection(include=sorted(data.topics)),
            ),
            target=target.connection(),
            storage=StorageSettings(url=str(work_dir / "backups")),
            drill=DrillSettings(),
            offset_reset=OffsetResetSettings(),
        )
        return run_drill(config, work_dir=work_dir, report_path=report_path, progress=progress, stop=stop)
