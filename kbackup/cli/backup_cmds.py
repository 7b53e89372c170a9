"""``backup``, ``list``, ``describe``, ``validate`` and ``status``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ByteSize

from kbackup.app.overrides import (
    backup_id_of,
    backup_job,
    metrics_settings,
    storage_settings,
    with_bootstrap_servers,
    with_encryption_key,
    with_engine,
)
from kbackup.cli.common import (
    BackupIdOption,
    BootstrapOption,
    ConfigOption,
    EncryptionKeyOption,
    EngineOption,
    JsonOption,
    MetricsBindOption,
    MetricsPortOption,
    MetricsTextfileOption,
    PathOption,
    SparkMasterOption,
    duration_flag,
    json_mode,
    load_config,
    print_json,
    run_context,
)
from kbackup.core.durations import format_duration
from kbackup.core.errors import (
    BackupIntegrityError,
    IncompleteBackupError,
    InterruptedByUser,
    NotFoundError,
    RecoveryPointAlert,
    UsageError,
)
from kbackup.core.secrets import redact
from kbackup.core.throttle import throttled_text
from kbackup.core.times import iso_of_ms
from kbackup.storage import Storage, open_storage

if TYPE_CHECKING:
    from kbackup.backup.status import UnreadableBackup
    from kbackup.core.config import StorageSettings

#: Both spellings name the origin cluster: backup's --source-cluster-id (backup.source_cluster_id)
#: and show-offset-mapping's older --source-cluster.
SourceClusterOption = Annotated[
    str | None,
    typer.Option(
        "--source-cluster-id",
        "--source-cluster",
        metavar="NAME",
        help="Origin cluster name stamped on every record (x-kafka-backup-cluster).",
    ),
]


#: backup, restore and three-phase-restore: the rate limit of the copy (docs/backup.md, docs/restore.md).
MaxBytesPerSecondOption = Annotated[
    str | None,
    typer.Option(
        "--max-bytes-per-second",
        metavar="SIZE",
        help="Rate limit: bytes of keys and values a second, a number or a size (50MiB, 200MB).",
        show_default="no limit",
    ),
]
#: backup: the local engine's worker processes (docs/backup.md, "Workers").
BackupWorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        metavar="N",
        help="Worker processes of the local engine, each copying slices of the increment with its own "
        "consumer; ignored with --engine spark.",
        show_default="backup.workers, else auto: one per two cores for 2,000,000 records or more",
    ),
]
MaxRecordsPerSecondOption = Annotated[
    int | None,
    typer.Option(
        "--max-records-per-second",
        metavar="N",
        help="Rate limit: records produced a second.",
        show_default="no limit",
    ),
]


def existing_store(storage: Storage) -> Storage:
    """``storage``, refused when it is a folder that is not there: most often a mistyped path, and
    the same mistake on every command that reads backups (exit 9, docs/exit-codes.md)."""
    if not storage.location_exists():
        raise NotFoundError(
            f"there is no folder {storage.url}",
            hint="check --path (relative to the current folder) or storage.url (relative to the config "
            "file's folder)",
        )
    return storage


def check_store_exists(settings: StorageSettings) -> None:
    """:func:`existing_store` for a command that opens the storage later itself: the location only,
    without its key (a KMS is asked once, by the command)."""
    existing_store(open_storage(settings.model_copy(update={"encryption": None})))


def open_backup_storage(config_path: Any, path: str | None, encryption_key: str | None = None) -> Storage:
    return open_storage(storage_settings(with_encryption_key(load_config(config_path), encryption_key), path))


def backup(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    include: Annotated[
        list[str] | None,
        typer.Option("--include", metavar="REGEX", help="Topic regex to back up (repeatable)."),
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", metavar="REGEX", help="Topic regex to skip (repeatable).")
    ] = None,
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    source_cluster_id: SourceClusterOption = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep copying until SIGINT/SIGTERM.")] = False,
    engine: EngineOption = None,
    spark_master: SparkMasterOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_bind: MetricsBindOption = None,
    metrics_textfile: MetricsTextfileOption = None,
    as_json: JsonOption = False,
    encryption_key: EncryptionKeyOption = None,
    max_bytes_per_second: MaxBytesPerSecondOption = None,
    workers: BackupWorkersOption = None,
) -> None:
    """Copy topics and consumer-group offsets from a Kafka cluster to Parquet on object storage.

    A first run copies every selected partition up to the end offsets it reads at start;
    running again with the same backup id adds an increment from where the last one ended.
    With --follow it keeps copying and commits an increment every checkpoint_interval_secs.
    The local engine copies on --workers processes of this machine (kafka-backup docs backup);
    with --engine spark the increment is copied by Spark tasks (kafka-backup docs scaling).

    \b
    Example:
      kafka-backup backup -c backup.yaml --follow
    """
    from kbackup.app import backup_run

    json_mode(as_json)
    cfg = with_encryption_key(with_engine(load_config(config), engine, spark_master), encryption_key)
    job = backup_job(
        cfg,
        bootstrap_servers=bootstrap_servers,
        include=include,
        exclude=exclude,
        path=path,
        backup_id=backup_id,
        source_cluster_id=source_cluster_id,
        follow=follow,
        max_bytes_per_second=max_bytes_per_second,
        workers=workers,
    )
    observed = metrics_settings(cfg, port=metrics_port, bind_address=metrics_bind, textfile=metrics_textfile)
    prepared = backup_run.prepare(cfg, job, observed)
    with run_context(
        prepared.metrics, observed, on_signal="finishing the segments and committing what was copied"
    ) as run:
        outcome = backup_run.run(cfg, prepared, stop=run.stop, progress=run.progress)
    summary = outcome.summary
    if as_json:
        print_json(outcome.to_dict())
        if outcome.interrupted:
            raise typer.Exit(InterruptedByUser.exit_code)
        if summary.problems:
            raise typer.Exit(IncompleteBackupError.exit_code)
        return
    for item in summary.increments:
        typer.echo(
            f"committed increment {item.increment} of backup {summary.backup_id}: {item.records:,} records, "
            f"{size_text(item.bytes)} in {item.segments} segment(s)"
            + (f", {item.consumer_groups} consumer group(s)" if item.consumer_groups is not None else "")
            + (
                f", {item.group_history_readings} reading(s) of the groups between increments"
                if item.group_history_readings
                else ""
            )
            + (" (stopped early)" if item.partial else "")
        )
    if summary.nothing_new_since is not None:
        typer.echo(
            f"nothing new since increment {summary.nothing_new_since} of backup {summary.backup_id}: "
            "no increment committed"
        )
    rate = f", {summary.records / summary.seconds:,.0f} records/s" if summary.seconds > 0 else ""
    typer.echo(
        f"backup {summary.backup_id} ({summary.mode}) from cluster {summary.source_cluster_id} to "
        f"{summary.storage_url}: {len(summary.topics)} topic(s), {summary.partitions} partition(s), "
        f"{summary.records:,} records, {size_text(summary.bytes)}, {summary.segments} segment(s), "
        f"{summary.seconds:.1f}s{rate}"
    )
    throttled = throttled_text(summary.throttled_secs, "backup.max_bytes_per_second")
    if throttled is not None:
        typer.echo(throttled)
    for problem in summary.problems:
        typer.echo(f"problem: {problem}")
    for warning in summary.warnings:
        typer.echo(f"warning: {warning}")
    if outcome.interrupted:
        done = (
            f"increment {summary.increments[-1].increment} holds what was copied"
            if summary.increments
            else "nothing was committed"
        )
        raise InterruptedByUser(
            f"backup {summary.backup_id} interrupted before it reached its end offsets; {done}"
        )
    if summary.problems:
        raise IncompleteBackupError(
            f"backup {summary.backup_id} is not complete: {len(summary.problems)} problem(s), the first: "
            f"{summary.problems[0]}",
            hint="what was copied is committed; read the problems above, fix the source (or the "
            "selection) and run the backup again",
        )


def list_backups(
    path: PathOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    encryption_key: EncryptionKeyOption = None,
) -> None:
    """List the backups in a storage location: time, topics, record counts, sizes.

    \b
    Example:
      kafka-backup list -p s3://backups/kafka
    """
    from kbackup.backup.inspect import list_backups as list_rows

    json_mode(as_json)
    storage = existing_store(open_backup_storage(config, path, encryption_key))
    rows = list_rows(storage)
    if as_json:
        print_json({"storage": storage.url, "backups": rows})
        return
    if not rows:
        typer.echo(f"no backups in {storage.url}")
        return
    typer.echo(
        f"{'backup id':<24} {'last run':<24} {'incr':>4} {'topics':>6} {'records':>14} {'size':>10}  "
        "restorable from"
    )
    for row in rows:
        if "error" in row:
            typer.echo(f"{row['backup_id']:<24} DAMAGED: {row['error']}")
            continue
        if "locked" in row:
            typer.echo(f"{row['backup_id']:<24} NOT READ: {row['locked']}")
            continue
        typer.echo(
            f"{row['backup_id']:<24} {row['last_finished_at']:<24} {row['increments']:>4} "
            f"{len(row['topics']):>6} {row['records']:>14,} {size_text(row['bytes']):>10}  "
            f"{_time(row['restorable_from_timestamp'])}"
            + (f" (pruned, generation {row['retention_generation']})" if row["retention_generation"] else "")
            + (" (encrypted)" if row["encrypted"] else "")
        )


def describe(
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    encryption_key: EncryptionKeyOption = None,
    groups_history: Annotated[
        str | None,
        typer.Option(
            "--groups-history",
            metavar="GROUP",
            help="Show where this consumer group was over time instead: every reading of the groups "
            "the backup holds (the group history of backup.group_snapshot_interval, and each "
            "increment's snapshot), a row per position.",
        ),
    ] = None,
) -> None:
    """Show one backup: offset and time ranges per topic-partition, consumer-group snapshots, per
    increment the ACLs, SCRAM users and broker configs it captured and the erasures that rewrote
    it, and the backup's erasure records (counts only, never a key). With --groups-history, one
    group's positions over time.

    \b
    Example:
      kafka-backup describe -p s3://backups/kafka --backup-id nightly
    """
    from kbackup.backup.inspect import describe_backup

    json_mode(as_json)
    cfg = with_encryption_key(load_config(config), encryption_key)
    chosen = backup_id_of(cfg, backup_id)
    storage = existing_store(open_storage(storage_settings(cfg, path)))
    if groups_history is not None:
        _describe_group_history(storage, chosen, groups_history, as_json=as_json)
        return
    info = describe_backup(storage, chosen)
    if as_json:
        print_json(info)
        return
    source = info["source"]
    typer.echo(
        f"backup {info['backup_id']} in {info['storage']}: source cluster {source['cluster_id']} "
        f"(Kafka cluster {source.get('kafka_cluster_id')}), {info['records']:,} records, "
        f"{size_text(info['bytes'])}"
    )
    retention = info["retention"]
    if retention is not None:
        policy = ", ".join(f"{key}={value}" for key, value in retention["policy"].items())
        typer.echo(
            f"pruned: retention generation {retention['generation']} of {retention['created_at']}"
            + (f" ({policy})" if policy else "")
            + f"; increments from {retention['first_increment']}, partitions from their window start"
        )
    typer.echo("increments:")
    for row in info["increments"]:
        groups = "-" if row["consumer_groups"] is None else row["consumer_groups"]
        metadata = row["cluster_metadata"]
        typer.echo(
            f"  {row['increment']:>4}  {row['started_at']} to {row['finished_at']}  {row['mode'] or '':<8} "
            f"{row['records']:>12,} records {size_text(row['bytes']):>10}  groups {groups}"
            + (f", {metadata_text(metadata)}" if metadata is not None else "")
            + (f", group history {row['group_history']} reading(s)" if row["group_history"] else "")
            + (f", revision {row['revision']}" if row["revision"] else "")
        )
        for note in row["erasures"]:
            typer.echo(
                f"        erased by {note['request_id']} at {note['erased_at']}: "
                f"{erased_text(note['records'], note['topics'])}"
            )
    typer.echo("partitions:")
    for row in info["partitions"]:
        typer.echo(
            f"  {row['topic']}/{row['partition']}: {offsets_text(row['start_offset'], row['end_offset'])} "
            f"(log start {row['log_start_offset']}), {row['records']:,} records, "
            f"time {_time(row['min_timestamp'])} to {_time(row['max_timestamp'])}, "
            f"{row['segments']} segment(s)"
        )
    if info["erasures"]:
        typer.echo("erasure records:")
    for erasure in info["erasures"]:
        if "error" in erasure:
            typer.echo(f"  {erasure['request_id']}: unreadable ({erasure['error']})")
            continue
        increments = ", ".join(map(str, erasure["increments"]))
        typer.echo(
            f"  {erasure['request_id']} at {erasure['erased_at']}: "
            f"{erased_text(erasure['records'], erasure['topics'])}, increment(s) {increments or '-'}"
        )
    groups_info = info["consumer_groups"]
    if groups_info is None:
        typer.echo("consumer groups: no snapshot")
        return
    typer.echo(f"consumer groups (increment {groups_info['increment']}, taken {groups_info['taken_at']}):")
    if not groups_info["groups"]:
        typer.echo("  (no group had committed offsets on these topics)")
    for group in groups_info["groups"]:
        offsets = ", ".join(f"{o['topic']}/{o['partition']}@{o['offset']}" for o in group["offsets"])
        typer.echo(f"  {group['group_id']} ({group['state']}): {offsets}")


def _describe_group_history(storage: Storage, backup_id: str, group_id: str, *, as_json: bool) -> None:
    from kbackup.backup.group_positions import describe_group_history

    info = describe_group_history(storage, backup_id, group_id)
    if as_json:
        print_json(info)
        return
    interval = info["interval_secs"]
    precision = (
        f"read every {format_duration(interval)} between increments"
        if interval is not None
        else "read at each increment only (no backup.group_snapshot_interval)"
    )
    typer.echo(
        f"group {group_id} in backup {backup_id}: {len(info['positions'])} position(s) in "
        f"{info['readings']} reading(s) of the groups, {precision}; the group may have committed "
        "between two readings"
    )
    for row in info["positions"]:
        offsets = ", ".join(f"{o['topic']}/{o['partition']}@{o['offset']}" for o in row["offsets"])
        span = row["first_seen"] if row["readings"] == 1 else f"{row['first_seen']} to {row['last_seen']}"
        typer.echo(f"  {span}  (increment {row['increment']})  {offsets or 'no committed offset'}")


def erased_text(records: int, topics: dict[str, int]) -> str:
    """``17 records erased (orders 12, payments 5)``: what an erasure removed, in counts only."""
    per_topic = ", ".join(f"{topic} {count:,}" for topic, count in topics.items())
    return f"{records:,} records erased" + (f" ({per_topic})" if per_topic else "")


#: How a run's summary and ``describe`` name each kind of cluster metadata, and each status.
_METADATA_KINDS = {"acls": "ACLs", "scram_users": "SCRAM users", "broker_configs": "broker configs"}
_NOT_CAPTURED = {
    "no_authorizer": "none, no authorizer",
    "not_authorized": "not authorized",
    "failed": "failed",
}


def metadata_text(kinds: dict[str, dict[str, str | int]]) -> str:
    """``ACLs 12, SCRAM users 3, broker configs 2``; a kind not captured says why instead."""
    parts = []
    for kind, label in _METADATA_KINDS.items():
        status, count = kinds[kind]["status"], kinds[kind]["count"]
        parts.append(
            f"{label} {count}"
            if status == "captured"
            else f"{label} ({_NOT_CAPTURED.get(str(status), status)})"
        )
    return ", ".join(parts)


def validate(
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep", help="Re-read every segment and cluster-metadata file and check its checksum."
        ),
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    encryption_key: EncryptionKeyOption = None,
) -> None:
    """Check a backup's manifest (and with --deep every segment) for damage.

    \b
    Example:
      kafka-backup validate -c backup.yaml --deep
    """
    from kbackup.backup.inspect import validate_backup

    json_mode(as_json)
    cfg = with_encryption_key(load_config(config), encryption_key)
    chosen = backup_id_of(cfg, backup_id)
    # --deep re-reads every segment, minutes unattended: a run's patience, not a glance's.
    storage = existing_store(open_storage(storage_settings(cfg, path, run=deep)))
    report = validate_backup(storage, chosen, deep=deep)
    if as_json:
        print_json(report.to_dict())
        if not report.ok:
            raise typer.Exit(BackupIntegrityError.exit_code)
        return
    for warning in report.warnings:
        typer.echo(f"warning: {warning}", err=True)
    for error in report.errors:
        typer.echo(f"damaged: {error}", err=True)
    if not report.ok:
        raise BackupIntegrityError(
            f"backup {report.backup_id} in {storage.url} is damaged: {len(report.errors)} problem(s), "
            f"first: {report.errors[0]}"
        )
    checked = f", {report.segments_checked} segment(s) re-read and checksummed" if deep else ""
    if report.cluster_metadata_checked:
        checked += f", {report.cluster_metadata_checked} cluster-metadata file(s) read and checked"
    if report.group_history_checked:
        checked += f", {report.group_history_checked} group-history file(s) read and checked"
    if report.erasure_records_checked:
        checked += f", {report.erasure_records_checked} erasure record(s) checked"
    if not report.contents_checked:
        checked = f", {report.segments_checked} encrypted segment(s) checksummed without the key"
    warned = f", {len(report.warnings)} warning(s)" if report.warnings else ""
    typer.echo(
        f"backup {report.backup_id}: OK ({report.increments} increment(s), "
        f"{report.records:,} records{checked}{warned})"
    )


def offsets_text(start: int, end: int) -> str:
    """A partition's offsets from ``start`` up to ``end`` (exclusive) as every output says them: the
    first and the last offset, both included (docs/status.md, "Offsets and times")."""
    if end <= start:
        return f"no offsets (next {end})"
    return f"offsets {start} to {end - 1}"


def size_text(count: int) -> str:
    return ByteSize(count).human_readable(separator=" ")


def _time(millis: int | None) -> str:
    if millis is None or millis < 0:
        return "-"
    return iso_of_ms(millis)


def status(
    path: PathOption = None,
    backup_id: Annotated[
        str | None,
        typer.Option(
            "--backup-id",
            metavar="ID",
            help="Name of the backup.",
            show_default="backup_id, else every backup there",
        ),
    ] = None,
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    max_age: Annotated[
        str | None,
        typer.Option(
            "--max-age",
            metavar="DURATION",
            help="Alert when a backup's last increment is older than this, e.g. 15m, 2h, 1d or 1h30m.",
        ),
    ] = None,
    max_lag: Annotated[
        int | None,
        typer.Option(
            "--max-lag",
            metavar="RECORDS",
            min=0,
            help="Alert when a backup is more records behind the source's end offsets than this "
            "(reads the source; an unreachable source is an error).",
        ),
    ] = None,
    as_json: JsonOption = False,
    encryption_key: EncryptionKeyOption = None,
) -> None:
    """Show each backup's recovery point: last increment and its age, records, restorable window
    per partition and, with the source reachable, how many records it is behind.

    With --max-age and/or --max-lag it is an alerting check for cron or any monitoring system:
    one line per breach on stderr and exit code 16 (kafka-backup docs exit-codes). A backup that cannot be
    read is named in one line and does not stop the others' check: exit 16 if an alert fires,
    else its own code (8 damaged, 18 no key; kafka-backup docs status).

    \b
    Example:
      kafka-backup status -c backup.yaml --max-age 15m --max-lag 100000
    """
    from kbackup.backup.settings import SourceSettings
    from kbackup.backup.status import UnreadableBackup, collect_status, find_breaches

    json_mode(as_json)
    max_age_secs = None if max_age is None else duration_flag("--max-age", max_age)
    cfg = with_encryption_key(load_config(config), encryption_key)
    storage = existing_store(open_storage(storage_settings(cfg, path)))
    # No id at all means every backup there; an empty --backup-id is a mistake, refused as elsewhere.
    chosen = backup_id_of(cfg, backup_id) if backup_id is not None or cfg.backup_id else None
    source = with_bootstrap_servers(cfg.source, bootstrap_servers, SourceSettings)
    if max_lag is not None and source is None:
        raise UsageError(
            "--max-lag reads the source: give --bootstrap-servers or a config file with a source"
        )
    report = collect_status(
        storage, [chosen] if chosen else None, source=source, lag_required=max_lag is not None
    )
    breaches = find_breaches(report.statuses, max_age_secs=max_age_secs, max_lag=max_lag)
    if as_json:
        print_json(
            {
                "storage": storage.url,
                "backups": [item.to_dict() for item in report.statuses],
                "unreadable": [item.to_dict() for item in report.unreadable],
                "limits": {"max_age_seconds": max_age_secs, "max_lag_records": max_lag},
                "breaches": [breach.to_dict() for breach in breaches],
                "ok": not breaches and not report.unreadable,
            }
        )
    else:
        shown: list[Any] = [*report.statuses, *report.unreadable]
        for item in sorted(shown, key=lambda item: str(item.backup_id)):
            if isinstance(item, UnreadableBackup):
                typer.echo(
                    redact(f"backup {item.backup_id} in {storage.url}: cannot be read: {item.message}")
                )
            else:
                _print_status(item, storage.url)
    for breach in breaches:
        typer.echo(f"kafka-backup: alert: {breach.message}", err=True)
    for unreadable in report.unreadable:
        typer.echo(redact(f"kafka-backup: unreadable: {_unreadable_line(unreadable)}"), err=True)
    if report.unreadable:
        next_step = f"{report.unreadable[0].hint}; every other backup was checked"
        typer.echo(redact(f"kafka-backup: next step: {next_step}"), err=True)
    # An alert is what a monitor pages for: it wins over an unreadable backup, which the lines
    # above (and --json's unreadable) name either way. Without one, the unreadable backup's own
    # code: a damaged backup never passes as healthy.
    if breaches:
        raise typer.Exit(RecoveryPointAlert.exit_code)
    if report.unreadable:
        raise typer.Exit(report.unreadable[0].error.exit_code)


def _unreadable_line(item: UnreadableBackup) -> str:
    """``backup ID: why``, without saying the backup twice when the reason already starts with it."""
    prefix = f"backup {item.backup_id}: "
    reason = item.message[len(prefix) :] if item.message.startswith(prefix) else item.message
    return f"{prefix}{reason}"


def _print_status(item: Any, storage_url: str) -> None:
    typer.echo(
        f"backup {item.backup_id} in {storage_url}: increment {item.last_increment} committed "
        f"{item.last_committed_at} ({format_duration(item.age_seconds)} ago), {item.records:,} records, "
        f"{size_text(item.bytes)}, source cluster {item.source_cluster}"
    )
    for row in item.partitions:
        window = (
            "no records"
            if row.first_offset is None
            else f"{offsets_text(row.first_offset, row.last_offset + 1)}, "
            f"time {_time(row.first_timestamp)} to {_time(row.last_timestamp)}"
        )
        behind = "" if row.lag is None else f", behind {row.lag:,}"
        typer.echo(f"  {row.topic}/{row.partition}: {window}, {row.records:,} records{behind}")
    if item.source_checked is not None:
        typer.echo(f"  behind the source ({item.source_checked}): {item.lag:,} record(s)")
    elif item.lag_unknown_reason is not None:
        typer.echo(f"  behind the source: unknown ({item.lag_unknown_reason})")
    else:
        typer.echo("  behind the source: not checked (give --bootstrap-servers or a config with a source)")
