"""The typer application: global options and the list of commands.

Logic lives in kbackup.core and the stage packages; this layer only parses and prints.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup import __version__
from kbackup.cli import (
    backup_cmds,
    drill_cmds,
    key_cmds,
    mapping_cmds,
    prune_cmds,
    reset_cmds,
    restore_cmds,
    tools_cmds,
)
from kbackup.core.errors import ConfigError
from kbackup.core.logs import LOG_FORMATS, configure_logging
from kbackup.core.progress import disable_progress

app = typer.Typer(
    name="kafka-backup",
    help=(
        "Back up Kafka topics to Parquet on object storage, restore them to another cluster, "
        "and move consumer groups across with exact offsets.\n\n"
        "Exit codes are listed in docs/exit-codes.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    # Tracebacks are printed by kbackup.cli.main only under --debug, and never with
    # local variables (they would include passwords).
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kafka-backup {__version__}")
        raise typer.Exit(0)


@app.callback()
def global_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More logs (-v info, -vv debug).")
    ] = 0,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            metavar="text|json",
            help="Logs on stderr as text, or as JSON lines (time, level, logger, message, and the "
            "event's fields: backup_id, topic, partition, increment) for log shippers.",
        ),
    ] = "text",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="Never draw progress bars.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if log_format not in LOG_FORMATS:
        # A wrong value of an option, exit 3 as every other (docs/exit-codes.md).
        raise ConfigError(f"--log-format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    configure_logging(verbose, debug, log_format)
    if no_progress:
        disable_progress()


# Stage 1: backup and inspection.
app.command("backup")(backup_cmds.backup)
app.command("list")(backup_cmds.list_backups)
app.command("describe")(backup_cmds.describe)
app.command("validate")(backup_cmds.validate)
app.command("status")(backup_cmds.status)
app.command("prune")(prune_cmds.prune)
app.command("rekey")(key_cmds.rekey)
app.command("keygen")(key_cmds.keygen)
app.command("parquet-key")(key_cmds.parquet_key)
# Stage 2: restore.
app.command("restore")(restore_cmds.restore)
# Stage 3: mapping.
app.command("show-offset-mapping")(mapping_cmds.show_offset_mapping)
# Stage 4: reset.
app.add_typer(reset_cmds.offset_reset_app, name="offset-reset")
app.command("offset-reset-bulk")(reset_cmds.offset_reset_bulk)
app.command("offset-rollback")(reset_cmds.offset_rollback)
# The stages together.
app.command("three-phase-restore")(drill_cmds.three_phase_restore)
app.command("drill")(drill_cmds.drill)
# Tools.
app.command("check")(tools_cmds.check)
app.command("sandbox")(tools_cmds.sandbox)
