"""``offset-reset plan|execute``, ``offset-reset-bulk`` and ``offset-rollback``."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, load_config, not_built_yet

offset_reset_app = typer.Typer(
    help="Plan, review and execute consumer-group offset resets on the target cluster.",
    no_args_is_help=True,
)


@offset_reset_app.command("plan")
def plan(
    config: ConfigOption = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the plan (JSON) here.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Work out each group's new offsets on the target, and show them for review. Changes nothing."""
    load_config(config)
    raise not_built_yet("offset-reset plan")


@offset_reset_app.command("execute")
def execute(
    plan_file: Annotated[
        str | None, typer.Option("--plan", help="A plan written by 'offset-reset plan'.")
    ] = None,
    bootstrap_servers: BootstrapOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    allow_rewind: Annotated[
        bool, typer.Option("--allow-rewind", help="Allow moving a group backwards.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Apply a reviewed plan: snapshot current offsets, commit the new ones, read them back."""
    raise not_built_yet("offset-reset execute")


def offset_reset_bulk(
    config: ConfigOption = None,
    groups_file: Annotated[
        str | None, typer.Option("--groups-file", help="One consumer group per line.")
    ] = None,
    parallelism: Annotated[int, typer.Option("--parallelism", min=1, max=256, help="Groups at once.")] = 8,
    as_json: JsonOption = False,
) -> None:
    """Plan and execute resets for many consumer groups in parallel."""
    load_config(config)
    raise not_built_yet("offset-reset-bulk")


def offset_rollback(
    bootstrap_servers: BootstrapOption = None,
    snapshot: Annotated[str | None, typer.Option("--snapshot", help="Snapshot id to roll back to.")] = None,
    list_snapshots: Annotated[bool, typer.Option("--list", help="List the rollback snapshots.")] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Roll consumer groups back to the offsets saved before an execute."""
    load_config(config)
    raise not_built_yet("offset-rollback")
