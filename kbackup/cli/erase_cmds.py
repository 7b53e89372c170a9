"""``erase``: remove given keys' records from the backups themselves: plan, then --execute;
``--verify`` proves a key is gone (docs/erasure.md)."""

from __future__ import annotations

import json
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from kbackup.app.overrides import storage_settings, with_encryption_key
from kbackup.backup.lease import LeaseKeeper
from kbackup.cli.backup_cmds import existing_store, size_text
from kbackup.cli.common import (
    ConfigOption,
    EncryptionKeyOption,
    JsonOption,
    PathOption,
    json_mode,
    load_config,
    print_json,
)
from kbackup.core.config import validate_config
from kbackup.core.errors import ConfigError, UsageError, VerificationError
from kbackup.core.files import check_writable, write_file
from kbackup.core.progress import Progress
from kbackup.erase import ErasePlan, EraseResult, execute_erase, plan_erase, verify_keys_erased
from kbackup.format.catalog import BackupCatalog
from kbackup.format.erasure import check_request_id
from kbackup.format.record_match import RecordMatcher, RecordMatchSettings, parse_entry, read_keys_file
from kbackup.storage import Storage, open_storage

#: The word that names every backup of the store in place of one backup id.
ALL = "all"


def erase(
    backup: Annotated[
        str,
        # Said in the docstring: typer would print the argument's Python type beside it.
        typer.Argument(metavar="BACKUP_OR_ALL", hidden=True, show_default=False),
    ],
    config: ConfigOption = None,
    path: PathOption = None,
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="A record key to erase: its UTF-8 text, or hex:, base64:, text: or sha256: (repeatable).",
        ),
    ] = None,
    keys_file: Annotated[
        Path | None,
        typer.Option(
            "--keys-file", metavar="FILE", help="A file of keys, one per line in the syntax of --key."
        ),
    ] = None,
    headers: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            metavar="NAME=VALUE",
            help="Erase the records carrying this header value (value in the syntax of --key; repeatable).",
        ),
    ] = None,
    topics: Annotated[
        str | None,
        typer.Option(
            "--topics", metavar="PATTERN", help="Only the topics this regular expression matches in full."
        ),
    ] = None,
    request_id: Annotated[
        str | None,
        typer.Option(
            "--request-id",
            metavar="ID",
            help=(
                "The erasure request's reference, stored in the erasure record; needed with --execute "
                "(the same id finishes a killed erase). Plan only: erase-<UTC time>."
            ),
        ),
    ] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan-file", metavar="FILE", help="Also write the plan to FILE as JSON.")
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Rewrite the segments that hold matches (without: plan only).")
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Prove each --key is gone from every segment, and name the records listing it."
        ),
    ] = False,
    encryption_key: EncryptionKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Erase the records of given keys (or header values) from every segment of a backup that holds them.

    BACKUP_OR_ALL is a backup id, or 'all' for every backup in the store.

    Without --execute it prints the plan: per backup, increment, topic and partition, the segments
    holding matches, how many records and the bytes to rewrite (counts only, never the keys). With
    --execute it rewrites only those segments, keeping every other record and its offset, commits a
    new manifest revision per increment, stores an erasure record (keyed hashes of the keys, never
    the keys) and deletes the old segments last. A killed erase is finished by running it again
    with the same --request-id.

    \b
    Examples:
      kafka-backup erase nightly -c backup.yaml --key user-42 --request-id GDPR-0042
      kafka-backup erase all -c backup.yaml --keys-file erasure.txt --request-id GDPR-0043 --execute
      kafka-backup erase nightly -c backup.yaml --verify --key user-42
    """
    json_mode(as_json)
    cfg = with_encryption_key(load_config(config), encryption_key)
    if verify and (execute or headers or not (keys or keys_file)):
        raise UsageError(
            "--verify takes --key or --keys-file (the keys themselves), without --execute or --header"
        )
    if execute and request_id is None:
        # A rerun after a kill finishes the request only under the same id: a generated one would
        # leave the first run's revisions without an erasure record.
        raise UsageError(
            "erase --execute needs --request-id ID: it names the erasure record, and running the same "
            "command again after a kill finishes that request"
        )
    settings = _match_settings(keys, keys_file, headers)
    if settings.is_empty():
        raise UsageError("nothing to erase: give --key, --keys-file or --header NAME=VALUE")
    storage = existing_store(open_storage(storage_settings(cfg, path, run=execute)))
    chosen = None if backup == ALL else [backup]
    if verify:
        _verify(storage, chosen, [*(keys or []), *(read_keys_file(keys_file) if keys_file else [])], as_json)
        return
    matcher = RecordMatcher.from_settings(settings, base_dir=Path.cwd())
    pattern = _topics(topics)
    request = check_request_id(request_id or f"erase-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
    if plan_file is not None:
        check_writable(plan_file, "--plan-file")
    with tempfile.TemporaryDirectory(prefix="kafka-backup-erase-") as scratch, Progress() as progress:
        with progress.task("scanning", total=None, unit="records") as task:
            plan = plan_erase(
                storage, matcher, chosen, request_id=request, topics=pattern, scratch_dir=Path(scratch),
                scanned=task.advance,
            )  # fmt: skip
        if plan_file is not None:
            write_file(plan_file, json.dumps(plan.to_dict(), indent=2) + "\n", "--plan-file")
        if not execute:
            _show(plan, as_json, None)
            return
        total = sum(m.segment.record_count for item in plan.backups for m in item.matches)
        with progress.task("rewriting", total=total, unit="records") as task:
            result = execute_erase(
                storage, plan, matcher, scratch_dir=Path(scratch),
                hold_lease=lambda backup_id, run_id: LeaseKeeper(storage, backup_id, run_id),
                advanced=task.advance,
            )  # fmt: skip
    _show(plan, as_json, result)


def _match_settings(
    keys: list[str] | None, keys_file: Path | None, headers: list[str] | None
) -> RecordMatchSettings:
    by_name: dict[str, list[str]] = {}
    for value in headers or []:
        name, sep, entry = value.partition("=")
        if not sep or not name or not entry:
            raise ConfigError(f"--header {value.split('=', 1)[0]!r}=...: expected NAME=VALUE")
        by_name.setdefault(name, []).append(entry)
    data: dict[str, Any] = {"keys": list(keys or []), "headers": by_name}
    if keys_file is not None:
        data["keys_file"] = str(keys_file)
    return validate_config(data, RecordMatchSettings, "the erase options")


def _topics(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"--topics {pattern!r}: not a regular expression: {exc}") from None


def _verify(storage: Storage, chosen: list[str] | None, keys: list[str], as_json: bool) -> None:
    backup_ids = chosen if chosen is not None else BackupCatalog(storage).backup_ids()
    results: list[dict[str, Any]] = []
    still_there = 0
    values = []
    for number, entry in enumerate(keys, start=1):
        is_digest, value = parse_entry(entry)
        if is_digest:
            raise ConfigError(f"key {number}: --verify needs the key itself, not its sha256:")
        values.append(value)
    for number, key_proofs in enumerate(verify_keys_erased(storage, backup_ids, values), start=1):
        for proof in key_proofs:
            results.append({"key": number, **proof.to_dict()})
            still_there += 0 if proof.gone else 1
    document: dict[str, object] = {"storage": storage.url, "verified": results}
    if as_json and not still_there:
        print_json(document)
    elif not as_json:
        for row in results:
            state = "gone" if row["gone"] else f"STILL HELD by {row['records_found']} record(s)"
            listed = ", ".join(row["listed_by"]) or "no erasure record"
            typer.echo(
                f"key {row['key']} in {row['backup_id']}: {state} ({row['segments_checked']:,} segments, "
                f"{row['records_checked']:,} records checked); listed by {listed}"
            )
    if still_there:
        error = VerificationError(
            f"{still_there} key/backup pair(s) still hold the key",
            hint="run 'kafka-backup erase ... --execute' with that key",
        )
        # Under --json the one document printed is the error's, with the proofs beside it.
        error.json_context = document
        raise error


def _show(plan: ErasePlan, as_json: bool, result: EraseResult | None) -> None:
    if as_json:
        print_json({**plan.to_dict(), "executed": None if result is None else result.to_dict()})
        return
    mode = "executed" if result is not None else "plan only: run again with --execute to act"
    typer.echo(
        f"erase of {plan.matching} from {plan.storage_url}, request {plan.request_id}"
        + (f", topics {plan.topics}" if plan.topics else "")
        + f", {mode}"
    )
    for item in plan.backups:
        typer.echo(
            f"  {item.backup_id}: {item.records_matched:,} record(s) in {len(item.matches):,} segment(s) of "
            f"{len(item.increments):,} increment(s), {size_text(item.bytes_to_rewrite)} to rewrite "
            f"({item.segments_scanned:,} segments, {item.records_scanned:,} records scanned)"
        )
        if item.leased_by:
            typer.echo(f"    in use by {', '.join(item.leased_by)}")
        for row in item.partitions():
            typer.echo(
                f"    increment {row['increment']} {row['topic']}/{row['partition']}: {row['records']:,} "
                f"record(s) in {row['segments']:,} segment(s), {size_text(row['bytes'])}"
            )
    if result is not None:
        for done in result.backups:
            typer.echo(
                f"  {done['backup_id']}: erased {done['records_erased']:,} record(s) "
                f"({done['request_records_erased']:,} by request {result.request_id} in all), "
                f"removed {done['objects_removed']:,} object(s); record {done['erasure_record']}"
            )
