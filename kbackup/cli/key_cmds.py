"""``keygen`` and ``rekey``: the keys of encrypted backups (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kbackup.app.overrides import storage_settings, with_encryption_key
from kbackup.cli.backup_cmds import existing_store
from kbackup.cli.common import (
    ConfigOption,
    EncryptionKeyOption,
    JsonOption,
    PathOption,
    json_mode,
    load_config,
    print_json,
)
from kbackup.core.config import encryption_from_spec
from kbackup.core.errors import NotFoundError, PreconditionError
from kbackup.core.files import check_writable, write_file
from kbackup.storage import open_key, open_storage
from kbackup.storage.keys import LocalKey, decode_key, new_key_text

#: Why keygen and parquet-key refuse an existing --output: the file they write holds a key.
KEYGEN_REFUSAL = "keygen never overwrites a key"
PARQUET_KEY_REFUSAL = "parquet-key never overwrites a file"


def keygen(
    output: Annotated[
        Path,
        typer.Option("--output", "-o", metavar="FILE", help="Where to write the new key (created 0600)."),
    ],
    as_json: JsonOption = False,
) -> None:
    """Write a new random 256-bit key-encryption key to a file (never to the screen).

    The file is what storage.encryption.key_file (or --encryption-key file:FILE) reads. An existing
    file is never overwritten. Keep a copy somewhere safe: without it an encrypted backup is lost.

    \b
    Example:
      kafka-backup keygen --output /etc/kafka-backup/backup.key
    """
    json_mode(as_json)
    text = new_key_text()
    write_file(output, text, "keygen --output", never_overwrite=KEYGEN_REFUSAL)
    key_id = LocalKey(decode_key(text, f"key file {output}"), kind="file", source=f"key file {output}").key_id
    if as_json:
        print_json({"key_file": str(output), "key_id": key_id})
        return
    typer.echo(f"wrote a new key to {output} (key id {key_id}); keep a copy: without it the backups are lost")


def rekey(
    new_encryption_key: Annotated[
        str,
        typer.Option(
            "--new-encryption-key",
            metavar="SOURCE",
            help="The new key-encryption key: file:PATH, env:VARIABLE or kms:KEY_ID.",
        ),
    ],
    backup_id: Annotated[
        list[str] | None,
        typer.Option(
            "--backup-id", metavar="ID", help="A backup to re-key (repeatable); unset: every encrypted one."
        ),
    ] = None,
    path: PathOption = None,
    config: ConfigOption = None,
    encryption_key: EncryptionKeyOption = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Act on the plan (without: print it only).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Wrap encrypted backups' keys under a new key-encryption key; no data is rewritten.

    The current key comes from storage.encryption (or --encryption-key), the new one from
    --new-encryption-key. Without --execute the plan is printed. A rekey stopped at any point leaves
    each backup readable with the old key or the new one; the old key stops working once its
    keyring generation is deleted, at the end.

    \b
    Example:
      kafka-backup rekey -c backup.yaml --new-encryption-key kms:alias/kafka-backup-2027 --execute
    """
    from kbackup.backup.rekey import execute_rekey, plan_rekey

    json_mode(as_json)
    cfg = with_encryption_key(load_config(config), encryption_key)
    # --execute writes keyrings backup after backup: it rides out a store's restart as a run does.
    settings = storage_settings(cfg, path, run=execute)
    storage = existing_store(open_storage(settings))
    new_key = open_key(encryption_from_spec(new_encryption_key, "--new-encryption-key"), settings)
    plan = plan_rekey(storage, new_key, backup_id or None)
    written = execute_rekey(storage, plan, new_key) if execute else []
    if as_json:
        print_json({**plan.to_dict(), "executed": execute, "written": written})
        return
    for item in plan.items:
        if item.committed:
            typer.echo(
                f"{item.backup_id}: already wrapped by {plan.new_key_source} "
                f"(generation {item.to_generation})"
                + (
                    f"; older generations {item.older_generations} to delete"
                    if item.older_generations
                    else ""
                )
            )
            continue
        typer.echo(
            f"{item.backup_id}: keyring generation {item.from_generation} (key {item.from_key_id}) -> "
            f"generation {item.to_generation} (key {plan.new_key_id}, {plan.new_key_source})"
        )
    if not execute:
        typer.echo(f"plan only: {len(plan.items)} backup(s) would be re-keyed; add --execute to re-key them")
        return
    typer.echo(f"re-keyed {len(written)} backup(s); configure {plan.new_key_source} from now on")


#: parquet-java's key-list KMS client (in parquet-hadoop's test jar): the one that serves a master key
#: from ``parquet.encryption.key.list``.
KEY_LIST_KMS_CLIENT = "org.apache.parquet.crypto.keytools.mocks.InMemoryKMS"


def parquet_key(
    output: Annotated[
        Path,
        typer.Option("--output", "-o", metavar="FILE", help="Spark properties file to write (created 0600)."),
    ],
    backup_id: Annotated[
        str | None, typer.Option("--backup-id", metavar="ID", help="Name of the backup.")
    ] = None,
    path: PathOption = None,
    config: ConfigOption = None,
    encryption_key: EncryptionKeyOption = None,
    kms_client_class: Annotated[
        str,
        typer.Option(
            "--kms-client-class",
            metavar="CLASS",
            help="parquet-java KmsClient class serving the key list.",
        ),
    ] = KEY_LIST_KMS_CLIENT,
) -> None:
    """Write the Spark settings that read an encrypted backup's segments as Parquet (to a file only).

    The file holds the backup's Parquet master key: it opens every segment of this backup (not its
    manifests or any other backup). Use it as spark-submit --properties-file FILE; it sets
    spark.redaction.regex so the key stays out of Spark's UI. An existing file is never overwritten.

    \b
    Example:
      kafka-backup parquet-key -c backup.yaml --output nightly-spark.properties
    """
    from kbackup.app.overrides import backup_id_of
    from kbackup.format.catalog import BackupCatalog
    from kbackup.format.encryption import spark_properties, unlock

    cfg = with_encryption_key(load_config(config), encryption_key)
    chosen = backup_id_of(cfg, backup_id)
    # Before the key is unlocked (a KMS call): a file that cannot be written is refused first.
    check_writable(output, "parquet-key --output", never_overwrite=PARQUET_KEY_REFUSAL)
    storage = existing_store(open_storage(storage_settings(cfg, path)))
    if chosen not in BackupCatalog(storage).stored_ids():
        # Else it would pass for a backup that is not encrypted (no keyring either).
        raise NotFoundError(
            f"no backup {chosen!r} in {storage.url}",
            hint="'kafka-backup list --path URL' shows the backups there",
        )
    keys = unlock(storage, chosen)
    if keys is None:
        raise PreconditionError(
            f"backup {chosen} in {storage.url} is not encrypted: Spark reads its segments without a key"
        )
    lines = [f"# Spark settings to read backup {chosen}'s segments (kafka-backup docs security). A secret."]
    lines += [f"{name}={value}" for name, value in spark_properties(keys, kms_client_class).items()]
    write_file(output, "\n".join(lines) + "\n", "parquet-key --output", never_overwrite=PARQUET_KEY_REFUSAL)
    typer.echo(
        f"wrote the Spark settings of backup {chosen} to {output} (master key id {keys.master_key_id})"
    )
