"""``restore``: options -> kbackup.restore (prepare, dry_run, run) -> printed plan or summary."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.app.overrides import (
    RestoreFlags,
    backup_id_of,
    metrics_settings,
    restore_inputs,
    spark_engine,
    with_encryption_key,
    with_engine,
)
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
    pairs,
    print_json,
    run_context,
)
from kbackup.core.errors import ConfigError

#: ``--drop-keys-file``: a ``restore.filters`` rule for every topic (``three-phase-restore`` too).
AsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="TIME",
        help="The cluster as it was at this time (ISO 8601 with its zone, 2026-11-27T13:59:00Z): "
        "the records stamped at or before it; with three-phase-restore the groups at their "
        "positions of then too.",
        show_default="restore.as_of",
    ),
]
DropKeysFileOption = Annotated[
    str | None,
    typer.Option(
        "--drop-keys-file",
        metavar="FILE",
        help="Do not restore the records whose key the file lists (one a line: text, hex:, base64: or "
        "sha256:; # comments), in every topic; added after restore.filters.",
    ),
]
#: ``--tombstone-keys-file``: the same, restored as tombstones.
TombstoneKeysFileOption = Annotated[
    str | None,
    typer.Option(
        "--tombstone-keys-file",
        metavar="FILE",
        help="Restore the records whose key the file lists as tombstones (null value, key and headers "
        "kept), in every topic; added after restore.filters.",
    ),
]


def _offset_ranges(values: list[str] | None) -> dict[str, dict[str, dict[str, int | None]]]:
    ranges: dict[str, dict[str, dict[str, int | None]]] = {}
    for value in values or []:
        topic, _, rest = value.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        start, sep, end = rest.partition("-")
        if not topic or not partition.isdigit() or not sep or not (start.isdigit() or not start):
            raise ConfigError(
                f"--offset-range {value!r}: expected TOPIC:PARTITION:START-END (either side empty)"
            )
        if end and not end.isdigit():
            raise ConfigError(f"--offset-range {value!r}: END must be a number")
        ranges.setdefault(topic, {})[partition] = {
            "start": int(start) if start else None,
            "end": int(end) if end else None,
        }
    return ranges


def restore(
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
            help="Source topic (full-match regex) to restore; repeatable.",
            show_default="all",
        ),
    ] = None,
    topic_mapping: Annotated[
        list[str] | None,
        typer.Option(
            "--topic-mapping", metavar="SOURCE=TARGET", help="Rename a topic: SOURCE=TARGET (repeatable)."
        ),
    ] = None,
    repartition: Annotated[
        bool | None,
        typer.Option(
            "--repartition/--no-repartition",
            help="Spread records by key (Kafka's murmur2) where partition counts differ.",
            show_default=False,
        ),
    ] = None,
    target_partitions: Annotated[
        list[str] | None,
        typer.Option(
            "--target-partitions",
            metavar="TOPIC=N",
            help="Partition count of a created topic: SOURCE_TOPIC=N (repeatable).",
        ),
    ] = None,
    time_window_start: Annotated[
        str | None,
        typer.Option(
            "--time-window-start", metavar="TIME", help="Only records at or after: epoch ms or ISO-8601."
        ),
    ] = None,
    time_window_end: Annotated[
        str | None,
        typer.Option("--time-window-end", metavar="TIME", help="Only records before: epoch ms or ISO-8601."),
    ] = None,
    as_of: AsOfOption = None,
    offset_ranges: Annotated[
        list[str] | None,
        typer.Option(
            "--offset-range",
            metavar="TOPIC:PARTITION:START-END",
            help="Source offsets TOPIC:PARTITION:START-END, end exclusive (repeatable).",
        ),
    ] = None,
    exactly_once: Annotated[
        bool | None,
        typer.Option(
            "--exactly-once/--idempotent",
            help="Transactions with stored progress, or not.",
            show_default="--exactly-once where the target supports transactions",
        ),
    ] = None,
    origin_headers: Annotated[
        bool | None,
        typer.Option(
            "--origin-headers/--no-origin-headers",
            help="Stamp x-kafka-backup-* origin headers, or not.",
            show_default="as the backup's backup.include_offset_headers",
        ),
    ] = None,
    create_topics: Annotated[
        bool | None,
        typer.Option("--create-topics/--no-create-topics", help="Create missing topics.", show_default=False),
    ] = None,
    skip_checksums: Annotated[
        bool,
        typer.Option("--skip-checksums", help="Check segment sizes only before starting (huge backups)."),
    ] = False,
    log_append_time: Annotated[
        str | None,
        typer.Option(
            "--log-append-time",
            metavar="keep-original|switch-after|rewrite",
            help="Target topics that would use LogAppendTime: keep-original (created as CreateTime, "
            "existing ones refused), switch-after (the same, then switched to LogAppendTime), rewrite "
            "(the broker stamps the restore time).",
            show_default="restore.log_append_time, else keep-original",
        ),
    ] = None,
    drop_keys_file: DropKeysFileOption = None,
    tombstone_keys_file: TombstoneKeysFileOption = None,
    max_bytes_per_second: MaxBytesPerSecondOption = None,
    max_records_per_second: MaxRecordsPerSecondOption = None,
    purge_target: Annotated[
        str | None,
        typer.Option(
            "--purge-target",
            metavar="none|records|topics",
            help="Before the first record, empty the existing target topics: records (delete their "
            "records) or topics (delete and create them again as the backup's).",
            show_default="restore.purge_target, else none",
        ),
    ] = None,
    force_purge: Annotated[
        bool,
        typer.Option("--force-purge", help="Purge even while a consumer group is active on a purged topic."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be created and written; change nothing.")
    ] = False,
    workers: WorkersOption = None,
    engine: EngineOption = None,
    spark_master: SparkMasterOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_bind: MetricsBindOption = None,
    metrics_textfile: MetricsTextfileOption = None,
    encryption_key: EncryptionKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a backup into a target cluster, stamping each record with x-kafka-backup-* origin headers.

    Source partitions are restored on --workers processes of this machine, or with --engine spark
    each by a Spark task (kafka-backup docs restore, kafka-backup docs scaling).

    \b
    Example:
      kafka-backup restore -c dr.yaml --dry-run
    """
    import kbackup.restore as restore_stage
    from kbackup.app.metrics import RecoveryMetrics

    json_mode(as_json)
    cfg = with_encryption_key(with_engine(load_config(config), engine, spark_master), encryption_key)
    # The options' values first, then what is missing: a wrong value is named even without a backup id.
    flags = RestoreFlags(
        topics=topics or [],
        topic_mapping=pairs(topic_mapping, "--topic-mapping"),
        repartition=repartition,
        target_partitions=pairs(target_partitions, "--target-partitions"),
        time_window_start=time_window_start,
        time_window_end=time_window_end,
        as_of=as_of,
        offset_ranges=_offset_ranges(offset_ranges),
        exactly_once=exactly_once,
        origin_headers=origin_headers,
        create_topics=create_topics,
        skip_checksums=skip_checksums,
        log_append_time=log_append_time,
        drop_keys_file=drop_keys_file,
        tombstone_keys_file=tombstone_keys_file,
        max_bytes_per_second=max_bytes_per_second,
        max_records_per_second=max_records_per_second,
        purge_target=purge_target,
        force_purge=force_purge,
        workers=workers,
    )
    inputs = restore_inputs(
        cfg,
        bootstrap_servers=bootstrap_servers,
        path=path,
        backup_id=backup_id,
        flags=flags,
    )
    backup_id_of(cfg, backup_id)  # in the words and with the exit code of every command that needs one
    if dry_run:
        check_store_exists(inputs.storage)
        job = restore_stage.prepare(
            backup_id=inputs.backup_id, storage=inputs.storage, target=inputs.target, settings=inputs.settings
        )
        report = restore_stage.dry_run(job, on_spark=cfg.engine == "spark")
        if as_json:
            print_json(report.to_dict())
        else:
            typer.echo("\n".join(report.lines()))
        return
    observed = metrics_settings(cfg, port=metrics_port, bind_address=metrics_bind, textfile=metrics_textfile)
    metrics = RecoveryMetrics(
        restore_stage.required_backup_id(inputs.backup_id),
        command="restore",
        health_window_secs=observed.health_window_secs,
    )
    with run_context(metrics, observed, on_signal="committing what was produced, then stopping") as run:
        # Once the metrics settings are taken (a wrong one is named first), before any work.
        check_store_exists(inputs.storage)
        metrics.phase("restore")
        job = restore_stage.prepare(
            backup_id=inputs.backup_id,
            storage=inputs.storage,
            target=inputs.target,
            settings=inputs.settings,
            metrics=metrics,
        )
        summary = restore_stage.run(
            job, progress=run.progress, stop=run.stop, metrics=metrics, engine=spark_engine(cfg)
        )
        metrics.phase("done")
    if as_json:
        print_json(summary.to_dict())
    else:
        typer.echo("\n".join(summary.lines()))
