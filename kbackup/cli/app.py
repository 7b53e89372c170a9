"""The typer application: global options and the list of commands.

Logic lives in kbackup.core and the stage packages; this layer only parses and prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from kbackup import __version__
from kbackup.cli import (
    backup_cmds,
    docs_cmds,
    drill_cmds,
    erase_cmds,
    key_cmds,
    mapping_cmds,
    metadata_cmds,
    prune_cmds,
    reset_cmds,
    restore_cmds,
    tools_cmds,
)
from kbackup.core.errors import ConfigError
from kbackup.core.logs import LOG_FORMATS, configure_logging
from kbackup.core.progress import disable_progress

#: The global options (kafka-backup's own, before the command) a user may also type after it:
#: ``kafka-backup list -p kb --debug`` is what the "run again with --debug" hint leads to.
GLOBAL_FLAGS = ("--debug", "--no-progress", "--verbose")
GLOBAL_WITH_VALUE = ("--log-format",)
_VERBOSE_SHORT = re.compile(r"-v+")


def hoist_global_options(args: list[str]) -> list[str]:
    """``args`` with the global options found after the command moved in front of it, in their
    order; everything after ``--`` stays where it is."""
    hoisted: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        name = arg.partition("=")[0]
        if arg in GLOBAL_FLAGS or _VERBOSE_SHORT.fullmatch(arg) or (name in GLOBAL_WITH_VALUE and "=" in arg):
            hoisted.append(arg)
        elif arg in GLOBAL_WITH_VALUE and index + 1 < len(args):
            hoisted.extend(args[index : index + 2])
            index += 1
        else:
            rest.append(arg)
        index += 1
    return hoisted + rest


def range_in_words(low: float | None, high: float | None) -> str | None:
    """An option's bounds as --help says them (typer writes x>=10 and 1<=x<=256)."""
    if low is None and high is None:
        return None
    if high is None:
        return f"at least {low}"
    if low is None:
        return f"at most {high}"
    return f"{low} to {high}"


# typer renders every option's range with this function; the product's help says bounds in words.
setattr(typer.core, "describe_number_range", range_in_words)  # noqa: B010


class KafkaBackupGroup(TyperGroup):
    """The command group: global options taken after the command too, and each command's summary
    (the first sentence of its help) listed whole, wrapped instead of cut at click's 45 characters."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = hoist_global_options(args)
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name="kafka-backup",
    cls=KafkaBackupGroup,
    help=(
        "Back up Kafka topics to Parquet on object storage, restore them to another cluster, "
        "and move consumer groups across with exact offsets.\n\n"
        "Global options go before the command or after it. Exit codes: kafka-backup docs exit-codes; "
        "every document: kafka-backup docs."
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


@dataclass
class GlobalOptions:
    """What the global options said, for the error report of kbackup.cli.main: ``run`` passes one
    as the context's ``obj`` and reads it once the command has ended, however it ended."""

    debug: bool = False


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kafka-backup {__version__}")
        raise typer.Exit(0)


@app.callback()
def global_options(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, show_default=False, help="More logs (-v info, -vv debug)."
        ),
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
    if isinstance(ctx.obj, GlobalOptions):
        ctx.obj.debug = debug
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
app.command("erase")(erase_cmds.erase)
app.command("rekey")(key_cmds.rekey)
app.command("keygen")(key_cmds.keygen)
app.command("parquet-key")(key_cmds.parquet_key)
# Stage 2: restore.
app.command("restore")(restore_cmds.restore)
app.add_typer(metadata_cmds.restore_metadata_app, name="restore-metadata", cls=KafkaBackupGroup)
# Stage 3: mapping.
app.command("show-offset-mapping")(mapping_cmds.show_offset_mapping)
# Stage 4: reset.
app.add_typer(reset_cmds.offset_reset_app, name="offset-reset", cls=KafkaBackupGroup)
app.command("offset-reset-bulk")(reset_cmds.offset_reset_bulk)
app.command("offset-rollback")(reset_cmds.offset_rollback)
# The stages together.
app.command("three-phase-restore")(drill_cmds.three_phase_restore)
app.command("drill")(drill_cmds.drill)
# Tools.
app.command("check")(tools_cmds.check)
app.command("sandbox")(tools_cmds.sandbox)
app.command("docs")(docs_cmds.docs)
