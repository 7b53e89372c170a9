"""``three-phase-restore`` and ``drill``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from kbackup.cli.backup_cmds import MaxBytesPerSecondOption, MaxRecordsPerSecondOption, check_store_exists
from kbackup.cli.common import (
    BootstrapOption,
    ConfigOption,
    EncryptionKeyOption,
    EngineOption,
    JsonOption,
    MetricsBindOption,
    MetricsPortOption,
    MetricsTextfileOption,
    RestoreBackupIdOption,
    RestorePathOption,
    SparkMasterOption,
    WorkersOption,
    json_mode,
    load_config,
    local_nodes_option,
    print_json,
    run_context,
)
from kbackup.cli.restore_cmds import AsOfOption, DropKeysFileOption, TombstoneKeysFileOption
from kbackup.core.errors import UsageError


def three_phase_restore(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    path: RestorePathOption = None,
    backup_id: RestoreBackupIdOption = None,
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="REGEX",
            help="Source topic (full-match regex) to restore, and whose groups' offsets to move; repeatable.",
            show_default="restore.topics, else all",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir", metavar="DIR", help="Where phase results are recorded (three_phase.state_dir)."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print each phase's plan; create or write nothing."),
    ] = False,
    accept_gap: Annotated[
        bool,
        typer.Option(
            "--accept-gap",
            help="Exit 0 when groups resume after a recovery gap (three_phase.accept_gap); else exit 12.",
        ),
    ] = False,
    drop_keys_file: DropKeysFileOption = None,
    tombstone_keys_file: TombstoneKeysFileOption = None,
    max_bytes_per_second: MaxBytesPerSecondOption = None,
    max_records_per_second: MaxRecordsPerSecondOption = None,
    workers: WorkersOption = None,
    engine: EngineOption = None,
    spark_master: SparkMasterOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_bind: MetricsBindOption = None,
    metrics_textfile: MetricsTextfileOption = None,
    encryption_key: EncryptionKeyOption = None,
    as_of: AsOfOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore data, move every consumer group to its exact place, and audit it, in one resumable run.

    The phases, in order: restore, reset, verify, mapping, audit. The restore writes the
    backup's records with origin headers; the reset plans and commits each group's new
    offsets, found from the origin headers; verify judges each moved group from the records
    around it on the target (exit 11 wrong, 12 recovery gap, 13 unverifiable); the mapping
    scans the restored topics into exact offset ranges (Spark), and the audit recounts every
    committed position from it (exit 15 if it disagrees). With three_phase.build_mapping
    always or when-needed, the mapping runs before the reset instead and there is no audit.
    Run the same command again after an interruption: finished phases are skipped.
    Flags replace what they name in the config, as for restore.

    \b
    Example:
      kafka-backup three-phase-restore -c dr.yaml --dry-run
    """
    json_mode(as_json)
    from kbackup.app.metrics import RecoveryMetrics
    from kbackup.app.overrides import (
        RestoreFlags,
        metrics_settings,
        three_phase_config,
        with_encryption_key,
        with_engine,
    )
    from kbackup.app.three_phase import checked_backup_id, three_phase_dry_run
    from kbackup.app.three_phase import three_phase_restore as run_three_phase

    cfg = three_phase_config(
        with_encryption_key(with_engine(load_config(config), engine, spark_master), encryption_key),
        bootstrap_servers=bootstrap_servers,
        path=path,
        backup_id=backup_id,
        topics=topics,
        state_dir=str(state_dir) if state_dir is not None else None,
        accept_gap=accept_gap,
        drop_keys_file=drop_keys_file,
        tombstone_keys_file=tombstone_keys_file,
        rates=RestoreFlags(
            max_bytes_per_second=max_bytes_per_second,
            max_records_per_second=max_records_per_second,
            workers=workers,
        ),
        as_of=as_of,
    )
    if dry_run:
        check_store_exists(cfg.storage)
        preview = three_phase_dry_run(cfg)
        if as_json:
            print_json(preview.to_dict())
        else:
            typer.echo("\n".join(preview.lines()))
        return
    observed = metrics_settings(cfg, port=metrics_port, bind_address=metrics_bind, textfile=metrics_textfile)
    metrics = RecoveryMetrics(
        checked_backup_id(cfg), command="three-phase-restore", health_window_secs=observed.health_window_secs
    )
    with run_context(
        metrics, observed, on_signal="stopping at the next safe point; run again to continue"
    ) as run:
        # Once the metrics settings are taken (a wrong one is named first), before any work.
        check_store_exists(cfg.storage)
        summary = run_three_phase(cfg, progress=run.progress, stop=run.stop, metrics=metrics)
        metrics.phase("done")
    if as_json:
        print_json(summary.to_dict())
        return
    for phase in summary.phases:
        resumed = " (done in an earlier run)" if phase.name in summary.resumed_phases else ""
        details = ", ".join(
            f"{key} {value}"
            for key, value in phase.details.items()
            if not isinstance(value, dict) and key != "compaction"
        )
        typer.echo(f"{phase.name:<8} {phase.seconds:7.1f}s{resumed}  {details}")
        for facts in phase.details.get("compaction") or []:
            typer.echo(
                f"{'':<18}{facts['topic']} is compacted: the target's cleaner may remove "
                f"{facts['may_remove']:,} of the {facts['records']:,} record(s) restored"
            )
    if summary.recovery_seconds is not None and summary.total_seconds is not None:
        typer.echo(
            f"groups committed {summary.recovery_seconds:.1f}s after the start (the recovery time); "
            f"run complete after {summary.total_seconds:.1f}s"
        )
    typer.echo(f"three-phase restore complete; state in {summary.state_file}")


def drill(
    config: ConfigOption = None,
    local: Annotated[
        bool, typer.Option("--local", help="Start two throwaway local clusters and drill on realistic data.")
    ] = False,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Where to write the drill report (JSON).")
    ] = None,
    records: Annotated[
        int,
        typer.Option("--records", min=10, metavar="N", help="With --local: records per source partition."),
    ] = 2_000,
    secured: Annotated[
        bool,
        typer.Option(
            "--secured",
            help="With --local: both clusters run the authorizer; the source's ACLs and SCRAM users are "
            "restored first, and each app principal must be allowed and denied on the target exactly "
            "as on the source (exit 11 if not).",
        ),
    ] = False,
    nodes: Annotated[
        int,
        local_nodes_option(
            "With --local: nodes per cluster. 3 drills production's shape: every topic on three "
            "nodes with min.insync.replicas=2, on both the source and the target."
        ),
    ] = 1,
    engine: EngineOption = None,
    spark_master: SparkMasterOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_bind: MetricsBindOption = None,
    metrics_textfile: MetricsTextfileOption = None,
    encryption_key: EncryptionKeyOption = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="TIME",
            help="Drill a restore as of this time (ISO 8601 with its zone, 2026-11-27T13:59:00Z), or "
            "auto (halfway through the history): no backup is taken; the config's backup is restored "
            "with the records stamped at or before it and the groups at their positions of then, from "
            "its group history (exit 10 outside it). With --local, auto only: the drill makes the "
            "history first.",
            show_default="restore.as_of",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Disaster-recovery drill: a three-phase restore of a fresh backup, then a proof.

    It backs up, restores under a prefix (restore, reset and verify copies of the groups,
    mapping, audit), then proves by consuming that no group skips a record; exit 11 if one
    would. With --engine spark the backup and the restore run as Spark tasks (kafka-backup
    docs scaling). With --local --secured the clusters run the authorizer: the restore
    brings the source's ACLs and SCRAM users back first, then each app principal connects to
    both clusters and must be allowed and denied the same things (exit 11 if not). With
    --local --nodes 3 each cluster has three nodes, replicated like a production cluster.
    With --as-of the drill restores the backup the config names as it was at that moment
    (its group history: backup.group_snapshot_interval) and proves each group against its
    position of then; with --local --as-of auto its backup is a follow run while the groups
    commit forward, and each group's position of the moment is checked against the drill's
    own record of its commits too (exit 11 if one is not a position it had then).

    \b
    Example:
      kafka-backup drill --local
      kafka-backup drill --local --secured --records 200
      kafka-backup drill --local --nodes 3 --records 200
      kafka-backup drill -c drill.yaml --as-of 2026-11-27T13:59:00Z
    """
    json_mode(as_json)
    from kbackup.app.drill import LOCAL_DRILL_BACKUP_ID, drill_backup_id, run_drill, run_local_drill
    from kbackup.app.drill_history import AUTO
    from kbackup.app.metrics import RecoveryMetrics
    from kbackup.app.overrides import metrics_settings, with_encryption_key, with_engine, with_restore_as_of

    if as_of is not None and as_of != AUTO and local:
        raise UsageError(
            f"--local --as-of takes {AUTO}, not a time: the local drill makes its group history while it "
            "runs, so no time named beforehand lies inside it",
            hint=f"use --local --as-of {AUTO}, or --as-of TIME with --config naming a backup with a "
            "group history",
        )
    if not local and config is None:
        raise UsageError("drill needs --config (source, target, storage), or --local")
    if secured and not local:
        raise UsageError(
            "--secured goes with --local: it starts its own authorizer-enabled clusters",
            hint="add --local, or restore a config's ACLs and users with restore_metadata.enabled",
        )
    if nodes != 1 and not local:
        raise UsageError(
            f"--nodes {nodes} goes with --local: a drill with --config runs on the clusters the file names",
            hint="add --local to drill on throwaway clusters of that many nodes, or drop --nodes",
        )
    if local and config is not None:
        # The local drill makes its own clusters, storage and groups: a file would be ignored.
        raise UsageError(
            "give --local or --config, not both: --local drills two throwaway local clusters and reads "
            "no config file",
            hint="drop --config to drill locally, or --local to drill the clusters the file names",
        )
    cfg = with_encryption_key(
        with_engine(load_config(None if local else config), engine, spark_master), encryption_key
    )
    # A time without its zone is refused here (exit 3), before any cluster is touched.
    cfg = with_restore_as_of(cfg, None if as_of == AUTO else as_of)
    # Named before the run, so that its metrics carry the backup id the drill takes.
    backup_id = LOCAL_DRILL_BACKUP_ID if local else drill_backup_id(cfg)
    observed = metrics_settings(cfg, port=metrics_port, bind_address=metrics_bind, textfile=metrics_textfile)
    metrics = RecoveryMetrics(backup_id, command="drill", health_window_secs=observed.health_window_secs)
    with run_context(metrics, observed, on_signal="stopping the drill at the next safe point") as run:
        if local:
            report_path = report or Path("drill-report.json")
            result = run_local_drill(
                report_path=report_path,
                records_per_partition=records,
                progress=run.progress,
                stop=run.stop,
                metrics=metrics,
                engine=cfg.engine,
                mapping=cfg.mapping,
                encryption=cfg.storage.encryption,
                secured=secured,
                nodes=nodes,
                as_of=as_of == AUTO,
            )
        else:
            report_path = report or Path(cfg.drill.report_path)
            with tempfile.TemporaryDirectory(prefix="kbackup-drill-") as scratch:
                result = run_drill(
                    cfg,
                    work_dir=Path(scratch),
                    report_path=report_path,
                    backup_id=backup_id,
                    progress=run.progress,
                    stop=run.stop,
                    metrics=metrics,
                    as_of=AUTO if as_of == AUTO else None,
                )
        if result.passed and result.unproven is None:
            metrics.phase("done")
    if as_json:
        print_json(result.to_dict())
    else:
        for line in result.summary_lines():
            typer.echo(line)
        typer.echo(f"report: {report_path} and {report_path.with_suffix('.html')}")
    failure = result.failure(report_path)
    if failure is not None:
        raise failure
