"""``restore``."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, load_config, not_built_yet


def restore(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    path: Annotated[str | None, typer.Option("--path", "-p", help="Storage URL of the backup.")] = None,
    backup_id: Annotated[str | None, typer.Option("--backup-id", help="Backup to restore.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be written; change nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay a backup into a target cluster, stamping each record with x-kafka-backup-* origin headers."""
    load_config(config)
    raise not_built_yet("restore")
