"""``backup``, ``list``, ``describe`` and ``validate``."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, load_config, not_built_yet

PathOption = Annotated[
    str | None,
    typer.Option("--path", "-p", help="Storage URL: a folder, file:///folder or s3://bucket/prefix."),
]
BackupIdOption = Annotated[str | None, typer.Option("--backup-id", help="Name of the backup.")]


def backup(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="Topic regex to back up (repeatable).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Topic regex to skip (repeatable).")
    ] = None,
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    source_cluster_id: Annotated[
        str | None, typer.Option("--source-cluster-id", help="Origin cluster name stamped on every record.")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep copying until SIGINT/SIGTERM.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Copy topics and consumer-group offsets from a Kafka cluster to Parquet on object storage."""
    load_config(config)
    raise not_built_yet("backup")


def list_backups(path: PathOption = None, config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """List the backups in a storage location: time, topics, record counts, sizes."""
    load_config(config)
    raise not_built_yet("list")


def describe(
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one backup: offset and time ranges per topic-partition, consumer-group snapshots."""
    load_config(config)
    raise not_built_yet("describe")


def validate(
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    deep: Annotated[
        bool, typer.Option("--deep", help="Re-read every segment and check its checksum.")
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check a backup's manifest (and with --deep every segment) for damage."""
    load_config(config)
    raise not_built_yet("validate")
