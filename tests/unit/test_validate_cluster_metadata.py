"""``validate`` knows each increment's cluster-metadata file (docs/format.md, "Cluster metadata"):
a missing or truncated one is found by the listing, a changed, swapped or wrongly sealed one by
``--deep``, which reads each in full; each problem is one line naming the object, and exit 8. A
file under metadata/ that no manifest names is a warning, as unlisted segments are.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import BackupIntegrityError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.encryption import BackupKeys, keys_for_new_backup, seal_manifest
from kbackup.format.layout import manifest_key, object_key
from kbackup.format.schema import FORMAT_VERSION
from kbackup.storage import LocalStorage, Storage, open_storage
from tests.support.cli_run import RunCli
from tests.support.encryption_keys import new_key, spec
from tests.support.metadata_backups import commit_increment, metadata_bytes

INCREMENTS = 3


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    """Backup ``b``: three increments, each naming its cluster-metadata file."""
    storage = LocalStorage(tmp_path / "store")
    for increment in range(INCREMENTS):
        commit_increment(storage, tmp_path, increment)
    return storage


def metadata_path(storage: LocalStorage, increment: int) -> Path:
    """Where increment ``increment``'s file lies, found by the name the format gives it."""
    [path] = (storage.root / "b" / "metadata").glob(f"{increment:08d}-run{increment}-*.json")
    return path


def stored_key(storage: LocalStorage, increment: int) -> str:
    return str(metadata_path(storage, increment).relative_to(storage.root))


def rewrite_reference(storage: LocalStorage, increment: int, **changes: object) -> None:
    """Change what a plain manifest says of its cluster-metadata file."""
    path = storage.local_path(manifest_key("b", increment))
    raw = json.loads(path.read_bytes())
    raw["cluster_metadata"].update(changes)
    path.write_text(json.dumps(raw))


def validate(cli: RunCli, storage: Storage, *flags: str) -> tuple[int, list[str], list[str], str]:
    """``validate`` of backup b: its exit code, its damage lines, its warning lines, stdout."""
    code, out, err = cli("validate", "-p", storage.url, "--backup-id", "b", *flags)
    lines = err.splitlines()
    damaged = [line for line in lines if line.startswith("damaged: ")]
    warnings = [line for line in lines if line.startswith("warning: ")]
    return code, damaged, warnings, out


def test_a_sound_backup_has_each_file_read_and_checked(store: LocalStorage, cli: RunCli) -> None:
    code, damaged, warnings, out = validate(cli, store, "--deep")
    assert (code, damaged, warnings) == (0, [], [])
    assert "3 segment(s) re-read and checksummed, 3 cluster-metadata file(s) read and checked" in out
    code, _out, err = cli("validate", "-p", store.url, "--backup-id", "b", "--deep", "--json")
    assert code == 0, err
    assert json.loads(_out)["cluster_metadata_checked"] == INCREMENTS


def remove(storage: LocalStorage) -> None:
    metadata_path(storage, 1).unlink()


def truncate(storage: LocalStorage) -> None:
    path = metadata_path(storage, 1)
    path.write_bytes(path.read_bytes()[:-10])


def change_one_byte(storage: LocalStorage) -> None:
    path = metadata_path(storage, 1)
    data = bytearray(path.read_bytes())
    at = data.index(b"app-1") + 4
    data[at] = ord("7")  # the same size: only the SHA-256 tells
    path.write_bytes(bytes(data))


def swap_with_increment_0(storage: LocalStorage) -> None:
    metadata_path(storage, 1).write_bytes(metadata_path(storage, 0).read_bytes())


def swap_and_rechecksum(storage: LocalStorage) -> None:
    """Increment 0's file copied over increment 1's, and increment 1's manifest made to agree with
    its size and SHA-256 (a copy tool that checksummed again): only the file's identity tells."""
    swap_with_increment_0(storage)
    zero = BackupCatalog(storage).load("b").manifests[0].cluster_metadata
    assert zero is not None
    rewrite_reference(storage, 1, size_bytes=zero.size_bytes, sha256=zero.sha256)


def name_another_increments_file(storage: LocalStorage) -> None:
    """Increment 1's manifest names increment 0's file (its size and SHA-256 too)."""
    zero = BackupCatalog(storage).load("b").manifests[0].cluster_metadata
    assert zero is not None
    rewrite_reference(storage, 1, key=zero.key, size_bytes=zero.size_bytes, sha256=zero.sha256)
    metadata_path(storage, 1).unlink()  # its own file is gone: the one line is about the name


#: case -> the damage, whether the listing finds it (else only --deep), what the one line says.
DAMAGE: dict[str, tuple[Callable[[LocalStorage], None], bool, str]] = {
    "missing": (remove, True, "(increment 1) is missing"),
    "truncated": (truncate, True, "bytes, increment 1 says"),
    "one-byte-changed": (change_one_byte, False, "does not match its manifest (size or SHA-256 differs)"),
    "swapped": (swap_with_increment_0, False, "does not match its manifest (size or SHA-256 differs)"),
    "swapped-and-rechecksummed": (
        swap_and_rechecksum,
        False,
        "belongs to backup b increment 0 (run run0), not to the manifest that names it",
    ),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_file_is_one_line_naming_it_and_exit_8(store: LocalStorage, cli: RunCli, case: str) -> None:
    damage, listing_finds_it, says = DAMAGE[case]
    key = stored_key(store, 1)
    damage(store)
    for flags in ([], ["--deep"]):
        code, damaged, _warnings, _out = validate(cli, store, *flags)
        if not flags and not listing_finds_it:
            assert (code, damaged) == (0, []), "a same-size change is --deep's to find, as for segments"
            continue
        assert code == BackupIntegrityError.exit_code, damaged
        assert len(damaged) == 1, damaged  # one problem, one line, with --deep too
        assert key in damaged[0], damaged
        assert says in damaged[0], damaged


def test_a_manifest_naming_another_increments_file_is_one_line(store: LocalStorage, cli: RunCli) -> None:
    name_another_increments_file(store)
    code, damaged, _warnings, _out = validate(cli, store)
    assert code == BackupIntegrityError.exit_code
    assert damaged == [
        f"damaged: increment 1: cluster metadata key {stored_key(store, 0).removeprefix('b/')} "
        "does not match its increment or run"
    ]


def test_a_file_no_manifest_names_is_a_warning(store: LocalStorage, cli: RunCli) -> None:
    # What a run that died before its manifest leaves: the file of the increment it would commit.
    store.put_bytes_if_absent("b/metadata/00000003-run3-0badc0de.json", metadata_bytes(3))
    code, damaged, warnings, out = validate(cli, store, "--deep")
    assert (code, damaged) == (0, [])
    assert len(warnings) == 1, warnings
    assert "1 object(s)" in warnings[0], warnings
    assert "b/metadata/00000003-run3-0badc0de.json" in warnings[0], warnings
    assert "are in no manifest" in warnings[0]
    assert "1 warning(s)" in out


@pytest.fixture
def encrypted(tmp_path: Path) -> tuple[Storage, BackupKeys, str]:
    """An encrypted backup b of three increments (no segments: their manifests and files); its
    storage with the key, the backup's keys, and the key as the CLI takes it."""
    settings = new_key(tmp_path)
    storage = open_storage(StorageSettings(url=str(tmp_path / "sealed"), encryption=settings))
    keys = keys_for_new_backup(storage, "b")
    assert keys is not None
    return storage, keys, spec(settings)


def test_an_encrypted_backups_files_are_checked_with_the_key_and_named_as_unchecked_without(
    encrypted: tuple[Storage, BackupKeys, str], tmp_path: Path, cli: RunCli
) -> None:
    storage, keys, key = encrypted
    for increment in range(INCREMENTS):
        commit_increment(storage, tmp_path, increment, keys=keys)
    code, damaged, warnings, out = validate(cli, storage, "--deep", "--encryption-key", key)
    assert (code, damaged, warnings) == (0, [], [])
    assert "3 cluster-metadata file(s) read and checked" in out
    code, damaged, warnings, out = validate(cli, storage)
    assert (code, damaged) == (0, [])
    assert len(warnings) == 1, warnings
    assert "cluster-metadata files" in warnings[0], warnings


def test_an_encrypted_file_sealed_under_another_key_fails_authentication(
    encrypted: tuple[Storage, BackupKeys, str], tmp_path: Path, cli: RunCli
) -> None:
    storage, keys, key = encrypted
    commit_increment(storage, tmp_path, 0, keys=keys)
    other = BackupKeys("b", 1, "local:other", os.urandom(32))
    # The manifest names it with its true size and SHA-256: only authentication can tell.
    commit_increment(storage, tmp_path, 1, keys=keys, sealed_with=other)
    code, damaged, _warnings, _out = validate(cli, storage, "--deep", "--encryption-key", key)
    assert code == BackupIntegrityError.exit_code
    assert len(damaged) == 1, damaged
    assert "b/metadata/00000001-run1-" in damaged[0], damaged
    assert "fails authentication" in damaged[0], damaged


def test_an_encrypted_file_swapped_from_another_increment_fails_authentication(
    encrypted: tuple[Storage, BackupKeys, str], tmp_path: Path, cli: RunCli
) -> None:
    storage, keys, key = encrypted
    for increment in range(2):
        commit_increment(storage, tmp_path, increment, keys=keys)
    zero, one = BackupCatalog(storage).load("b").manifests
    assert zero.cluster_metadata is not None
    assert one.cluster_metadata is not None
    # Increment 0's sealed file over increment 1's, and increment 1's manifest sealed again naming
    # it with that size and SHA-256 (what only someone with the key could do).
    one_key = object_key("b", one.cluster_metadata.key)
    assert isinstance(storage, LocalStorage)
    storage.local_path(one_key).write_bytes(storage.get_bytes(object_key("b", zero.cluster_metadata.key)))
    swapped = one.cluster_metadata.model_copy(
        update={"size_bytes": zero.cluster_metadata.size_bytes, "sha256": zero.cluster_metadata.sha256}
    )
    # Sealed as a run seals it: the plain manifest (version 1) inside; the reader names it version 2.
    plain = one.model_copy(update={"cluster_metadata": swapped, "format_version": FORMAT_VERSION})
    resealed = seal_manifest(plain, keys)
    storage.local_path(manifest_key("b", 1)).write_bytes(resealed)
    code, damaged, _warnings, _out = validate(cli, storage, "--deep", "--encryption-key", key)
    assert code == BackupIntegrityError.exit_code
    assert len(damaged) == 1, damaged
    assert one_key in damaged[0], damaged
    assert "fails authentication" in damaged[0], damaged
