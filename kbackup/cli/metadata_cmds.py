"""``restore-metadata plan|execute``: a backup's ACLs, SCRAM users and configs onto the target."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from kbackup.app.overrides import storage_settings, with_encryption_key
from kbackup.cli.backup_cmds import check_store_exists
from kbackup.cli.common import (
    BootstrapOption,
    ConfigOption,
    EncryptionKeyOption,
    JsonOption,
    RestoreBackupIdOption,
    RestorePathOption,
    json_mode,
    load_config,
    plan_target,
    print_json,
)
from kbackup.core.files import check_writable, write_file
from kbackup.format.metadata_plan import read_metadata_plan, render_metadata_plan
from kbackup.restore import MetadataResult

restore_metadata_app = typer.Typer(
    help=(
        "Plan, review and execute the restore of a backup's cluster metadata (ACLs, SCRAM users, "
        "broker and topic configs) onto the target cluster."
    ),
    no_args_is_help=True,
)

PLAN_OUTPUT = "restore-metadata plan --output"


@restore_metadata_app.command("plan")
def plan(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    path: RestorePathOption = None,
    backup_id: RestoreBackupIdOption = None,
    encryption_key: EncryptionKeyOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write the plan (JSON) here.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Compare the backup's cluster metadata with the target's, item by item. Changes nothing.

    Each item is create, exists, differs, alter, skip, manual (a command to run by hand) or delete
    (only with restore_metadata.remove_extra_acls). The plan holds no password.

    \b
    Example:
      kafka-backup restore-metadata plan -c dr.yaml --output metadata-plan.json
    """
    from kbackup.app.metadata_request import plan_metadata

    json_mode(as_json)
    cfg = with_encryption_key(load_config(config), encryption_key)
    if output is not None:
        check_writable(output, PLAN_OUTPUT)
    check_store_exists(storage_settings(cfg, path, run=True))
    planned = plan_metadata(cfg, bootstrap_servers=bootstrap_servers, path=path, backup_id=backup_id)
    if output is not None:
        write_file(output, planned.to_json_bytes(), PLAN_OUTPUT)
    if as_json:
        print_json(planned.model_dump(mode="json"))
        return
    typer.echo(render_metadata_plan(planned))
    if output is not None:
        connect = f"-c {shlex.quote(str(config))}" if config is not None else "-b SERVERS"
        typer.echo(
            f"plan written to {output}; review it, then: "
            f"kafka-backup restore-metadata execute --plan {shlex.quote(str(output))} {connect}"
        )


@restore_metadata_app.command("execute")
def execute(
    plan_file: Annotated[
        Path, typer.Option("--plan", metavar="FILE", help="A plan written by 'restore-metadata plan'.")
    ],
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Apply a reviewed plan to the cluster it was made for, in order: configs, SCRAM users, ACLs.

    SCRAM passwords are read now from restore_metadata.scram_passwords_file or _env. At the first
    refusal it stops and says what it applied before it; running it again is safe.

    \b
    Example:
      kafka-backup restore-metadata execute -c dr.yaml --plan metadata-plan.json
    """
    from kbackup.app.metadata_request import execute_metadata

    json_mode(as_json)
    cfg = load_config(config)
    reviewed = read_metadata_plan(plan_file)
    target = plan_target(
        cfg,
        bootstrap_servers,
        command="restore-metadata execute",
        plan_file=plan_file,
        planned=reviewed.target,
        hint="give -c with the config the plan was made from (its target section carries the "
        "security settings and the password source)",
    )
    result = execute_metadata(cfg, reviewed, target=target, dry_run=dry_run)
    _emit_result(result, as_json)


def _emit_result(result: MetadataResult, as_json: bool) -> None:
    if as_json:
        print_json(asdict(result))
        return
    verb = "would" if result.dry_run else "did"
    for line in result.applied:
        typer.echo(f"{verb}: {line}")
    for line in result.left:
        typer.echo(f"left: {line}")
    typer.echo(
        f"{len(result.applied)} change(s) {'planned' if result.dry_run else 'applied'}, "
        f"{result.unchanged} already in place, {len(result.left)} left (manual, skipped or differing)"
    )
