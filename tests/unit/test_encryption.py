"""Encryption's parts without Kafka: key sources, wraps, the keyring, sealed manifests, segments."""

from __future__ import annotations

import base64
import json
import os
import pickle
from pathlib import Path

import pytest

from kbackup.core.config import EncryptionSettings, StorageSettings, encryption_from_spec
from kbackup.core.errors import BackupIntegrityError, ConfigError, EncryptionKeyError
from kbackup.format.encryption import (
    BackupKeys,
    keyring_generations,
    keys_for_new_backup,
    open_manifest,
    read_sealed_manifest,
    seal_manifest,
    unlock,
    write_keyring_entry,
)
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    GroupOffset,
    GroupSnapshot,
    Manifest,
    SegmentEntry,
    SourceInfo,
)
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits, iter_segment_batches, open_segment
from kbackup.storage import LocalStorage, open_key, open_storage
from kbackup.storage.keys import LocalKey, new_key_text


def key_file(folder: Path, name: str = "k.key") -> Path:
    path = folder / name
    path.write_text(new_key_text())
    return path


def local_key(folder: Path, name: str = "k.key") -> LocalKey:
    key = open_key(EncryptionSettings(key_file=str(key_file(folder, name))))
    assert isinstance(key, LocalKey)
    return key


def manifest(backup_id: str = "nightly", increment: int = 1) -> Manifest:
    return Manifest(
        backup_id=backup_id,
        increment=increment,
        run_id="20261125T000000Z-00000001",
        previous_run_id="20261124T000000Z-00000000",
        tool_version="0.1.0",
        started_at="2026-11-25T00:00:00.000Z",
        finished_at="2026-11-25T00:00:01.000Z",
        source=SourceInfo(cluster_id="prod", bootstrap_servers=["kafka-1:9092"]),
        segments=[
            SegmentEntry(
                key="data/orders/0/00000000000000000000-20261125T000000Z-00000001.parquet",
                topic="orders",
                partition=0,
                first_offset=0,
                last_offset=9,
                record_count=10,
                size_bytes=1234,
                sha256="a" * 64,
                min_timestamp=5,
                max_timestamp=9,
            )
        ],
        consumer_groups=ConsumerGroupsSnapshot(
            taken_at="2026-11-25T00:00:00.500Z",
            groups=[
                GroupSnapshot(
                    group_id="billing-secret-group",
                    offsets=[GroupOffset(topic="orders", partition=0, offset=7)],
                )
            ],
        ),
    )


def keys(backup_id: str = "nightly") -> BackupKeys:
    return BackupKeys(backup_id, 1, "local:test", os.urandom(32))


def test_a_key_source_is_exactly_one_of_file_env_and_kms() -> None:
    assert encryption_from_spec("file:/k", "--encryption-key").key_file == "/k"
    assert encryption_from_spec("env:KB_KEY", "--encryption-key").key_env == "KB_KEY"
    assert encryption_from_spec("kms:alias/x:y", "--encryption-key").kms_key_id == "alias/x:y"
    for bad in ("file", "vault:abc", "file:", "/etc/key"):
        with pytest.raises(ConfigError, match="not a key source"):
            encryption_from_spec(bad, "--encryption-key")
    with pytest.raises(ValueError, match="exactly one of"):
        EncryptionSettings(key_file="/k", key_env="K")
    with pytest.raises(ValueError, match="not an environment variable name"):
        EncryptionSettings(key_env="c2VjcmV0Cg==")
    with pytest.raises(ValueError, match="exactly one of"):
        StorageSettings.model_validate({"url": "/b", "encryption": {}})


def test_key_files_and_variables_are_checked_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = key_file(tmp_path)
    text = path.read_text().strip()
    key = open_key(EncryptionSettings(key_file=str(path)))
    assert key.key_id.startswith("local:")
    assert text not in repr(key)
    assert base64.b64decode(text).hex() not in repr(key)
    monkeypatch.setenv("KB_TEST_KEY", text)
    assert open_key(EncryptionSettings(key_env="KB_TEST_KEY")).key_id == key.key_id  # same key, same id
    with pytest.raises(EncryptionKeyError, match="does not exist"):
        open_key(EncryptionSettings(key_file=str(tmp_path / "absent")))
    monkeypatch.delenv("KB_TEST_KEY")
    with pytest.raises(EncryptionKeyError, match="KB_TEST_KEY is not set"):
        open_key(EncryptionSettings(key_env="KB_TEST_KEY"))
    for malformed in (
        "not base64!",
        base64.b64encode(b"short").decode(),
        base64.b64encode(os.urandom(33)).decode(),
    ):
        (tmp_path / "bad").write_text(malformed)
        with pytest.raises(EncryptionKeyError, match="does not hold a 256-bit key"):
            open_key(EncryptionSettings(key_file=str(tmp_path / "bad")))


def test_a_wrap_opens_only_with_its_key_and_its_context(tmp_path: Path) -> None:
    first, second = local_key(tmp_path, "a"), local_key(tmp_path, "b")
    context = {"kafka-backup:backup-id": "nightly", "kafka-backup:keyring-generation": "1"}
    wrapped = first.wrap(b"r" * 32, context)
    assert first.unwrap(wrapped, context, what="x") == b"r" * 32
    with pytest.raises(EncryptionKeyError, match="does not open"):
        second.unwrap(wrapped, context, what="x")
    with pytest.raises(EncryptionKeyError, match="does not open"):
        first.unwrap(wrapped, {**context, "kafka-backup:backup-id": "other"}, what="x")
    assert first.wrap(b"r" * 32, context) != wrapped  # a fresh nonce each time


def test_keys_never_appear_in_repr_and_survive_pickling() -> None:
    opened = keys()
    assert opened.root_key.hex() not in repr(opened)
    assert base64.b64encode(opened.root_key).decode() not in repr(opened)
    opened.file_encryption_properties()  # makes the pyarrow factory, which is not pickled
    copy = pickle.loads(pickle.dumps(opened))
    assert copy.master_key == opened.master_key
    assert copy.derive("manifest", "3") == opened.derive("manifest", "3") != opened.derive("manifest", "4")
    assert keys("other").master_key_id != opened.master_key_id


def test_a_sealed_manifest_opens_only_under_its_own_name_and_backup() -> None:
    opened = keys()
    sealed = seal_manifest(manifest(), opened)
    assert b"billing-secret-group" not in sealed
    assert b"kafka-1:9092" not in sealed
    assert open_manifest(sealed, "m1", 1, opened) == manifest().model_copy(update={"format_version": 2})
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        open_manifest(sealed, "m2", 2, opened)  # replayed under another increment's name
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        open_manifest(
            sealed, "m1", 1, BackupKeys("nightly", 1, "local:test", os.urandom(32))
        )  # a re-created backup
    raw = json.loads(sealed)
    raw["segments"][0]["size_bytes"] += 1
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        open_manifest(json.dumps(raw).encode(), "m1", 1, opened)
    raw = json.loads(sealed)
    body = bytearray(base64.b64decode(raw["sealed"]))
    body[-1] ^= 1
    raw["sealed"] = base64.b64encode(bytes(body)).decode()
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        open_manifest(json.dumps(raw).encode(), "m1", 1, opened)
    # Without the key: what validate sees.
    visible = read_sealed_manifest(sealed, "m1")
    assert visible.increment == 1
    assert [s.sha256 for s in visible.segments] == ["a" * 64]
    with pytest.raises(EncryptionKeyError, match="is encrypted"):
        open_manifest(sealed, "m1", 1, None)
    # A plaintext manifest in an encrypted backup, and a version from the future.
    with pytest.raises(BackupIntegrityError, match="is not encrypted, in a backup that is"):
        open_manifest(manifest().to_json_bytes(), "m1", 1, opened)
    raw = json.loads(sealed)
    raw["format_version"] = 3
    with pytest.raises(BackupIntegrityError, match="reads versions up to 2"):
        open_manifest(json.dumps(raw).encode(), "m1", 1, opened)


def test_the_keyring_opens_with_the_newest_generation_the_key_opens(tmp_path: Path) -> None:
    old, new = local_key(tmp_path, "old"), local_key(tmp_path, "new")
    storage = LocalStorage(tmp_path / "store")
    assert keys_for_new_backup(storage, "nightly") is None  # no key configured: not encrypted
    storage.key_encryption_key = old
    made = keys_for_new_backup(storage, "nightly")
    assert made is not None
    assert [g for g, _ in keyring_generations(storage, "nightly")] == [1]
    again = keys_for_new_backup(storage, "nightly")  # a run after one that died before its manifest
    assert again is not None
    assert again.root_key == made.root_key
    assert write_keyring_entry(storage, "nightly", 2, made.root_key, new)
    assert not write_keyring_entry(storage, "nightly", 2, made.root_key, new)  # create-if-absent
    by_old = unlock(storage, "nightly")
    assert by_old is not None
    assert by_old.generation == 1
    storage.key_encryption_key = new
    by_new = unlock(storage, "nightly")
    assert by_new is not None
    assert (by_new.generation, by_new.root_key) == (2, made.root_key)
    storage.key_encryption_key = local_key(tmp_path, "third")
    named = ", ".join(sorted(f"file {key.key_id}" for key in (old, new)))
    with pytest.raises(
        EncryptionKeyError, match=f"is encrypted with {named}, not with the configured key file"
    ):
        unlock(storage, "nightly")
    storage.key_encryption_key = None
    with pytest.raises(EncryptionKeyError, match="no key is configured"):
        unlock(storage, "nightly")
    # A keyring entry moved to another backup does not open there.
    other = tmp_path / "store" / "other" / "keys"
    other.mkdir(parents=True)
    raw = json.loads((tmp_path / "store" / "nightly" / "keys" / "00000001.json").read_text())
    raw["backup_id"] = "other"
    (other / "00000001.json").write_text(json.dumps(raw))
    storage.key_encryption_key = old
    with pytest.raises(EncryptionKeyError, match="does not open"):
        unlock(storage, "other")


def test_an_encrypted_segment_holds_no_plaintext_and_reads_back_only_with_its_keys(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "store"))
    opened = keys()
    marker = b"SEGMENT-MARKER-" + os.urandom(4).hex().encode()

    def write(backup_id: str, with_keys: BackupKeys | None) -> list[SegmentEntry]:
        # Uncompressed: the plaintext control then holds the marker as it is.
        writer = PartitionSegmentWriter(
            storage, backup_id=backup_id, run_id="r1", source_cluster="prod", topic="orders", partition=0,
            limits=SegmentLimits(max_records=50, compression="none"), scratch_dir=tmp_path, keys=with_keys,
        )  # fmt: skip
        for offset in range(120):
            writer.append(offset, 1000 + offset, 0, marker + b"k", marker + b"v", [("h", marker)])
        return writer.finish()

    write("plain", None)
    assert all(marker in path.read_bytes() for path in (tmp_path / "store" / "plain").rglob("*.parquet"))
    segments = write("nightly", opened)
    assert len(segments) == 3
    for path in (tmp_path / "store" / "nightly").rglob("*.parquet"):
        assert marker not in path.read_bytes()
    rows = [
        row
        for s in segments
        for batch in iter_segment_batches(storage, "nightly", s, keys=opened)
        for row in batch.to_pylist()
    ]
    assert [row["offset"] for row in rows] == list(range(120))
    assert rows[0]["headers"] == [{"key": "h", "value": marker}]
    with (
        pytest.raises(BackupIntegrityError, match="not a readable Parquet file"),
        open_segment(storage, "nightly", segments[0]),
    ):
        pass
    with (
        pytest.raises(BackupIntegrityError, match="does not decrypt with backup nightly's key"),
        open_segment(storage, "nightly", segments[0], keys=keys()),
    ):
        pass


def test_a_plaintext_segment_is_refused_in_an_encrypted_backup(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "store"))
    writer = PartitionSegmentWriter(
        storage, backup_id="nightly", run_id="r1", source_cluster="prod", topic="orders", partition=0,
        limits=SegmentLimits(), scratch_dir=tmp_path,
    )  # fmt: skip
    writer.append(0, 1000, 0, b"k", b"v", [])
    (segment,) = writer.finish()
    with (
        pytest.raises(BackupIntegrityError, match="is not encrypted, in an encrypted backup"),
        open_segment(storage, "nightly", segment, keys=keys()),
    ):
        pass
