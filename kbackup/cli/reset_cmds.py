"""``offset-reset plan|execute``, ``offset-reset-bulk`` and ``offset-rollback``."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import (
    backup_id_of,
    reset_cluster,
    storage_settings,
    target_connection,
    with_point_in_time,
)
from kbackup.cli.backup_cmds import check_store_exists
from kbackup.cli.common import (
    BootstrapOption,
    ConfigOption,
    JsonOption,
    PathOption,
    json_mode,
    load_config,
    plan_target,
    print_json,
)
from kbackup.core.config import read_text_file
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.files import check_writable, write_file
from kbackup.core.progress import Progress
from kbackup.format.reset_plan import ResetPlan, read_plan, render_plan_table
from kbackup.format.rollback_snapshot import list_snapshots, read_snapshot
from kbackup.reset import ExecuteResult, execute_plan, rollback

offset_reset_app = typer.Typer(
    help="Plan, review and execute consumer-group offset resets on the target cluster.",
    no_args_is_help=True,
)

#: How a plan file that cannot be written is named in the error.
PLAN_OUTPUT = "offset-reset plan --output"
BULK_OUTPUT = "offset-reset-bulk --output"

SnapshotDirOption = Annotated[
    Path | None,
    typer.Option(
        "--snapshot-dir",
        metavar="DIR",
        help="Folder of rollback snapshots.",
        show_default="offset_reset.snapshot_dir",
    ),
]


def _read_groups_file(path: Path) -> list[str]:
    """One group id a line; blank lines and ``#`` comments skipped; UTF-8 (a byte order mark allowed)."""
    lines = read_text_file(path, "groups file").splitlines()
    groups = []
    for number, line in enumerate(lines, start=1):
        group = line.strip()
        if not group or group.startswith("#"):
            continue
        if "\x00" in group:
            # A C client would end the group id at the NUL: another group than the one written.
            raise ConfigError(
                f"groups file {path}: line {number} holds a NUL character, which no group id can"
            )
        groups.append(group)
    if not groups:
        raise ConfigError(f"groups file {path} lists no consumer group")
    return groups


def _make_plan(config: KBackupConfig, groups: list[str] | None) -> ResetPlan:
    from kbackup.app.reset_request import plan_reset

    with Progress() as progress:
        return plan_reset(config, groups=groups, progress=progress)


def _emit_plan(plan: ResetPlan, output: Path | None, connect: str, as_json: bool, what: str) -> None:
    if output is not None:
        write_file(output, plan.to_json_bytes(), what)
    if as_json:
        print_json(plan.model_dump(mode="json"))
    else:
        typer.echo(render_plan_table(plan))
        if output is not None:
            typer.echo(
                f"plan written to {output}; review it, then: "
                f"kafka-backup offset-reset execute --plan {shlex.quote(str(output))} {connect}"
            )


def _emit_result(result: ExecuteResult, as_json: bool) -> None:
    if as_json:
        print_json({**asdict(result), "changes": [asdict(change) for change in result.changes]})
        return
    verb = "would change" if result.dry_run else "changed"
    for change in result.changes:
        typer.echo(
            f"{verb} {change.group_id} {change.topic}/{change.partition}: "
            f"{'-' if change.before is None else change.before} -> {change.after}"
        )
    typer.echo(
        f"{len(result.changes)} offset(s) {verb}, {result.already_applied} already at the planned offset"
        + (
            f"; rollback snapshot {result.snapshot_id} at {result.snapshot_path}"
            if result.snapshot_id
            else ""
        )
    )


@offset_reset_app.command("plan")
def plan(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    path: PathOption = None,
    backup_id: Annotated[
        str | None,
        typer.Option("--backup-id", metavar="ID", help="Backup whose group offsets are moved (backup_id)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write the plan (JSON) here.")
    ] = None,
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--groups",
            "-g",
            metavar="GROUP[,GROUP...]",
            help="Groups to plan, comma-separated or repeated.",
            show_default="offset_reset.groups, else all",
        ),
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="TIME",
            help="Move the groups to where they were at this time (ISO 8601 with its zone, "
            "2026-11-27T13:59:00Z), read from the backup's group history; precision: "
            "backup.group_snapshot_interval.",
            show_default="offset_reset.as_of, else the latest snapshot",
        ),
    ] = None,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="Rewind the groups on the cluster the backup was taken from (its source section, "
            "or -b), to their positions of --as-of: no restore, no translation "
            "(offset_reset.strategy: rewind).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Work out each group's new offsets on the target, and show them for review. Changes nothing.

    The target (-b), the storage (-p) and the backup (--backup-id) come from the flags or the
    config file; the rest of the planning (strategy, mapping) from the file's offset_reset section.
    With --as-of the groups' offsets are those of that time; with --in-place they are rewound on
    the source cluster itself.

    \b
    Example:
      kafka-backup offset-reset plan -c dr.yaml --output plan.json
    """
    json_mode(as_json)
    cfg = with_point_in_time(load_config(config), as_of, in_place)
    cfg = _reset_config(cfg, bootstrap_servers, path, backup_id)
    if output is not None:
        # Planning can take minutes: a plan file that cannot be written is refused before it.
        check_writable(output, PLAN_OUTPUT)
    chosen = [group.strip() for value in groups or [] for group in value.split(",") if group.strip()]
    reviewed = _make_plan(cfg, chosen or None)
    # The plan holds the target's servers but no credentials (a plan file carries no secret), so
    # execute connects as the config says, or, without one, to the servers given here.
    assert cfg.target is not None  # _reset_config checked it
    connect = (
        f"-c {shlex.quote(str(config))}"
        if config is not None
        else f"-b {shlex.quote(','.join(cfg.target.bootstrap_servers))}"
    )
    if reviewed.strategy == "rewind":
        connect += " --allow-rewind"  # execute refuses to move a group back without it
    _emit_plan(reviewed, output, connect, as_json, PLAN_OUTPUT)


def _reset_config(
    config: KBackupConfig, bootstrap_servers: str | None, path: str | None, backup_id: str | None
) -> KBackupConfig:
    """The config the planning reads, with -b over its target, -p over its storage and --backup-id
    over its backup id; what the planning needs and neither gives is refused first (exit 2)."""
    target = reset_cluster(config, bootstrap_servers, rewind=config.offset_reset.strategy == "rewind")
    chosen = backup_id or config.backup_id
    if config.offset_reset.source_offsets != "live" or backup_id:
        # The groups' offsets come from the backup: it is named, and its folder exists.
        chosen = backup_id_of(config, backup_id)
        storage = storage_settings(config, path, run=True)
        check_store_exists(storage)
    else:
        storage = storage_settings(config, path, run=True)
    return config.model_copy(update={"target": target, "storage": storage, "backup_id": chosen})


@offset_reset_app.command("execute")
def execute(
    plan_file: Annotated[
        Path, typer.Option("--plan", metavar="FILE", help="A plan written by 'offset-reset plan'.")
    ],
    bootstrap_servers: BootstrapOption = None,
    config: ConfigOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    allow_rewind: Annotated[
        bool, typer.Option("--allow-rewind", help="Allow moving a group backwards.")
    ] = False,
    snapshot_dir: SnapshotDirOption = None,
    parallelism: Annotated[
        int, typer.Option("--parallelism", min=1, max=256, metavar="N", help="Groups at once.")
    ] = 8,
    as_json: JsonOption = False,
) -> None:
    """Apply a reviewed plan: re-check it, snapshot current offsets, commit the new ones, read them back.

    \b
    Example:
      kafka-backup offset-reset execute -c dr.yaml --plan plan.json
    """
    json_mode(as_json)
    cfg = load_config(config)
    reviewed = read_plan(plan_file)
    if reviewed.strategy == "rewind" and cfg.source is not None:
        # A rewind's groups are on the backup's source cluster (execute checks the plan's cluster id).
        target = reset_cluster(cfg, bootstrap_servers, rewind=True)
    else:
        target = plan_target(
            cfg,
            bootstrap_servers,
            command="offset-reset execute",
            plan_file=plan_file,
            planned=reviewed.target,
            hint="give -c with the config the plan was made from (its target section carries the "
            "security settings), or --bootstrap-servers for a plaintext cluster",
        )
    folder = snapshot_dir or Path(cfg.offset_reset.snapshot_dir)
    result = execute_plan(
        reviewed,
        target,
        snapshot_dir=folder,
        dry_run=dry_run,
        allow_rewind=allow_rewind,
        parallelism=parallelism,
    )
    _emit_result(result, as_json)


def offset_reset_bulk(
    config: ConfigOption = None,
    groups_file: Annotated[
        Path | None, typer.Option("--groups-file", metavar="FILE", help="One consumer group per line.")
    ] = None,
    parallelism: Annotated[
        int | None,
        typer.Option(
            "--parallelism",
            min=1,
            max=256,
            metavar="N",
            help="Groups at once.",
            show_default="offset_reset.parallel_consumers",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Also write the plan here.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan and check, change nothing.")] = False,
    allow_rewind: Annotated[
        bool, typer.Option("--allow-rewind", help="Allow moving a group backwards.")
    ] = False,
    snapshot_dir: SnapshotDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Plan and execute resets for many consumer groups in one go (one rollback snapshot for all).

    \b
    Example:
      kafka-backup offset-reset-bulk -c dr.yaml --groups-file groups.txt
    """
    json_mode(as_json)
    if config is None or groups_file is None:
        raise UsageError("offset-reset-bulk needs --config and --groups-file")
    cfg = load_config(config)
    group_ids = _read_groups_file(groups_file)
    if output is not None:
        check_writable(output, BULK_OUTPUT)  # before the planning, as offset-reset plan does
    reviewed = _make_plan(cfg, group_ids)
    if output is not None:
        write_file(output, reviewed.to_json_bytes(), BULK_OUTPUT)
    assert cfg.target is not None  # plan_reset checked it
    result = execute_plan(
        reviewed,
        cfg.target,
        snapshot_dir=snapshot_dir or Path(cfg.offset_reset.snapshot_dir),
        dry_run=dry_run,
        allow_rewind=allow_rewind,
        parallelism=parallelism if parallelism is not None else cfg.offset_reset.parallel_consumers,
    )
    if not as_json:
        totals = reviewed.totals()
        typer.echo(
            f"planned {totals['groups']} group(s), {totals['partitions']} partition(s); "
            f"{reviewed.rereads_words()}, recovery gap {totals['recovery_gap']}"
        )
    _emit_result(result, as_json)


def offset_rollback(
    bootstrap_servers: BootstrapOption = None,
    snapshot: Annotated[
        str | None, typer.Option("--snapshot", metavar="NAME", help="Snapshot id to roll back to.")
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="List the rollback snapshots.")] = False,
    snapshot_dir: SnapshotDirOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Roll consumer groups back to the offsets an execute saved before changing them.

    \b
    Example:
      kafka-backup offset-rollback -c dr.yaml --snapshot 20261122T053424Z-cee8d1
    """
    json_mode(as_json)
    if list_only and snapshot is not None:
        raise UsageError(
            "give --list or --snapshot, not both: --list only lists the snapshots, --snapshot rolls back"
        )
    cfg = load_config(config)
    folder = snapshot_dir or Path(cfg.offset_reset.snapshot_dir)
    if list_only or snapshot is None:
        snapshots = list_snapshots(folder)
        if as_json:
            print_json([item.model_dump(mode="json") for item in snapshots])
        elif not snapshots:
            typer.echo(f"no rollback snapshots in {folder}")
        for item in snapshots if not as_json else []:
            changed = sum(len(group.changed) for group in item.groups)
            typer.echo(
                f"{item.snapshot_id}  {item.created_at}  {len(item.groups)} group(s), "
                f"{changed} partition(s)  "
                f"cluster {item.target_cluster_id}"
            )
        return
    chosen = read_snapshot(folder / f"{snapshot}.json")
    changes = rollback(chosen, target_connection(cfg, bootstrap_servers), dry_run=dry_run)
    _emit_result(ExecuteResult(changes=changes, dry_run=dry_run), as_json)
