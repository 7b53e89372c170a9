"""``prune``: plan, and with ``--execute`` apply, a retention policy (docs/prune.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kbackup.app.overrides import storage_settings, with_encryption_key
from kbackup.cli.backup_cmds import existing_store, size_text
from kbackup.cli.common import (
    BackupIdOption,
    ConfigOption,
    EncryptionKeyOption,
    JsonOption,
    PathOption,
    json_mode,
    load_config,
    print_json,
)
from kbackup.core.config import validate_config
from kbackup.core.errors import PreconditionError, UsageError
from kbackup.core.progress import Progress
from kbackup.core.times import iso_utc
from kbackup.prune import BackupPlan, PrunePlan, execute_prune, plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import open_storage


def prune(
    config: ConfigOption = None,
    path: PathOption = None,
    backup_id: BackupIdOption = None,
    all_backups: Annotated[
        bool, typer.Option("--all", help="Apply the policy to every backup in the storage location.")
    ] = False,
    keep_last: Annotated[
        int | None, typer.Option("--keep-last", metavar="N", help="Keep the N newest backups.")
    ] = None,
    keep_within: Annotated[
        str | None,
        typer.Option(
            "--keep-within",
            metavar="DURATION",
            help="Keep backups committed within DURATION of the newest, e.g. 30d.",
        ),
    ] = None,
    keep_hourly: Annotated[
        int | None,
        typer.Option("--keep-hourly", metavar="N", help="Keep the newest backup of each of N hours."),
    ] = None,
    keep_daily: Annotated[
        int | None,
        typer.Option("--keep-daily", metavar="N", help="Keep the newest backup of each of N days."),
    ] = None,
    keep_weekly: Annotated[
        int | None,
        typer.Option("--keep-weekly", metavar="N", help="Keep the newest backup of each of N weeks."),
    ] = None,
    keep_monthly: Annotated[
        int | None,
        typer.Option("--keep-monthly", metavar="N", help="Keep the newest backup of each of N months."),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Inside each backup: remove segments whose records are all older than DURATION, e.g. 7d.",
        ),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            metavar="TIME",
            help="Inside each backup: remove segments whose records all lie before TIME (ISO 8601).",
        ),
    ] = None,
    max_total_bytes: Annotated[
        str | None,
        typer.Option(
            "--max-total-bytes",
            metavar="SIZE",
            help="Inside each backup: remove the oldest segments until it stores at most SIZE, e.g. 50GiB.",
        ),
    ] = None,
    orphan_grace: Annotated[
        str | None,
        typer.Option(
            "--orphan-grace",
            metavar="DURATION",
            help="Remove objects no manifest lists once older than DURATION.",
            show_default="1h",
        ),
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Act on the plan (without: print it only).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Allow a policy that removes every backup or all of one.")
    ] = False,
    encryption_key: EncryptionKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove old backups and old data inside backups by a retention policy: plan, then --execute.

    Rules across backups (--keep-*) keep a backup id if any of them selects it, by the time of
    its last committed increment; rules inside a backup (--older-than/--before,
    --max-total-bytes) move the start of its restorable window forward. Without rule options the
    config's backup.retention is the policy. A prune commits a new retention generation before
    it deletes anything, so a prune killed at any point leaves every backup readable.

    \b
    Examples:
      kafka-backup prune -p s3://backups/kafka --all --keep-daily 7 --keep-weekly 4
      kafka-backup prune -c backup.yaml --older-than 30d --execute
    """
    json_mode(as_json)
    if all_backups and backup_id:
        raise UsageError("give --backup-id or --all, not both")
    cfg = with_encryption_key(load_config(config), encryption_key)
    flags: dict[str, Any] = {
        "keep_last": keep_last,
        "keep_within": keep_within,
        "keep_hourly": keep_hourly,
        "keep_daily": keep_daily,
        "keep_weekly": keep_weekly,
        "keep_monthly": keep_monthly,
        "older_than": older_than,
        "before": before,
        "max_total_bytes": max_total_bytes,
    }
    policy = _policy(flags, cfg.backup.retention, orphan_grace=orphan_grace, force=force)
    if policy.empty and orphan_grace is None:
        raise UsageError(
            "no retention rule: give --keep-last/--keep-within/--keep-hourly/daily/weekly/monthly, "
            "--older-than/--before or --max-total-bytes (or set backup.retention in the config); "
            "--orphan-grace alone removes only objects no manifest lists"
        )
    chosen = None if all_backups else [backup_id or cfg.backup_id or ""]
    if chosen == [""]:
        raise UsageError(
            "no backup id: give --backup-id or set backup_id in the config file (or --all for every backup)"
        )
    # --execute deletes, most often from cron with no one watching: a run's patience, so a store
    # restarting midway does not stop it between its generation commit and its deletes.
    storage = existing_store(open_storage(storage_settings(cfg, path, run=execute)))

    plan = plan_prune(storage, policy, chosen)
    refused = [item.needs_force for item in plan.backups if item.needs_force]
    kept = [item for item in plan.backups if item.action not in ("remove", "finish-removal", "skip")]
    # Skipped (unreadable) backups are neither kept nor removed: a policy that removes none is no
    # "remove everything", whatever it would do to backups that are not there; and --force is
    # taught only for a plan that deletes something.
    removed = [item for item in plan.backups if item.action == "remove"]
    skipped = [item for item in plan.backups if item.action == "skip"]
    if policy.across_backups and not kept and removed and not policy.force:
        unread = f"; {len(skipped)} not read stay" if skipped else ""
        refused.append(
            f"the policy would remove every backup it read in {storage.url} ({len(removed)}{unread}); "
            "give --force to allow it"
        )
    if plan.deletes == 0:
        refused = []
    if not execute:
        if refused:
            error = PreconditionError(refused[0], hint="check the policy; --force allows it")
            # Under --json the plan goes out with the error, in one document.
            error.json_context = {**plan.to_dict(), "executed": None}
            if not as_json:
                _show(plan, as_json, executed=None)
            raise error
        _show(plan, as_json, executed=None)
        return
    if refused:
        raise PreconditionError(refused[0], hint="check the policy; --force allows it; nothing was removed")
    with Progress() as progress, progress.task("removing", total=plan.deletes, unit="objects") as task:
        result = execute_prune(storage, plan, advanced=task.advance)
    _show(plan, as_json, executed=result.to_dict())


def _policy(
    flags: dict[str, Any], base: RetentionSettings | None, *, orphan_grace: str | None, force: bool
) -> RetentionSettings:
    """The policy the rule options give, else the config's backup.retention; with --orphan-grace
    and --force over either."""
    rules = {key: value for key, value in flags.items() if value is not None}
    #: Each rule option as typed, so a wrong value names it (``--older-than 3x``), as status's do.
    typed = {key: f"--{key.replace('_', '-')} {value}" for key, value in rules.items()}
    if rules:
        data: dict[str, Any] = dict(rules)
        source = "the prune options"
    elif base is not None:
        data = base.model_dump(exclude_none=True)
        source = "backup.retention"
    else:
        data, source = {}, "the prune options"
    if orphan_grace is not None:
        data["orphan_grace"] = orphan_grace
        typed["orphan_grace"] = f"--orphan-grace {orphan_grace}"
    if force:
        data["force"] = True
    return validate_config(data, RetentionSettings, source, flags=typed)


def _show(plan: PrunePlan, as_json: bool, executed: dict[str, Any] | None) -> None:
    if as_json:
        print_json({**plan.to_dict(), "executed": executed})
        return
    policy = ", ".join(f"{key}={value}" for key, value in plan.policy.items())
    mode = "executed" if executed is not None else "plan only: run again with --execute to act"
    typer.echo(f"prune of {plan.storage_url} ({policy}), {mode}")
    for item in plan.backups:
        for line in _backup_lines(item):
            typer.echo(line)
    if executed is not None:
        typer.echo(
            f"removed {executed['objects_removed']:,} object(s), {size_text(executed['bytes_removed'])}, in "
            f"{executed['delete_requests']:,} delete request(s)"
        )
    else:
        typer.echo(f"would remove {plan.deletes:,} object(s), {size_text(plan.bytes_removed)}")


def _backup_lines(item: BackupPlan) -> list[str]:
    why = "; ".join(item.reasons)
    lines = [f"  {item.backup_id}: {item.action.upper()}" + (f" ({why})" if why else "")]
    if item.leased_by:
        lines.append(f"    in use by {', '.join(item.leased_by)}")
    if item.action in ("remove", "finish-removal"):
        lines.append(
            f"    every object goes: {len(item.objects) + len(item.retention_objects):,}, "
            f"{size_text(item.object_bytes)}"
        )
        return lines
    if item.action == "skip":
        return lines
    lines.append(
        f"    increments {item.increments_before:,} -> {item.increments_after:,}, "
        f"{size_text(item.bytes_before)} -> {size_text(item.bytes_after)}; "
        f"{len(item.segments):,} segment(s) and {len(item.manifests):,} manifest(s) go"
        + (
            f" with {len(item.metadata_files):,} cluster-metadata or group-history file(s)"
            if item.metadata_files
            else ""
        )
    )
    for window in item.windows:
        when = (
            iso_utc(window.first_time_after_ms / 1000, timespec="seconds")
            if window.first_time_after_ms is not None and window.first_time_after_ms >= 0
            else "nothing kept"
        )
        lines.append(
            f"    {window.topic}/{window.partition}: window starts at offset {window.start_after:,} "
            f"(was {window.start_before:,}, {window.records_removed:,} records go), oldest kept record {when}"
        )
    for gap in item.group_gaps:
        lines.append(
            f"    recovery gap: group {gap.group_id} committed {gap.topic}/{gap.partition} offset "
            f"{gap.committed_offset:,}, below the new window start {gap.window_start:,}"
        )
    if item.orphans or item.orphans_kept:
        lines.append(
            f"    unreferenced objects: {len(item.orphans):,} go ({size_text(item.orphan_bytes)}), "
            f"{item.orphans_kept:,} kept (younger than the grace period, or a running backup's)"
        )
    if item.needs_force:
        lines.append(f"    refused: {item.needs_force}")
    return lines
