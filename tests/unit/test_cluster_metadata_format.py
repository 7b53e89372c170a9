"""The cluster-metadata file of an increment (docs/format.md, "Cluster metadata"): written and read
back the same, plain and sealed; a newer version, a swapped or changed file and damaged bytes are
refused with one project error, never a crash."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbackup.backup.cluster_capture import write_cluster_metadata
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError, KBackupError
from kbackup.format.cluster_metadata import (
    ClusterMetadata,
    cluster_metadata_key,
    encode_cluster_metadata,
    parse_cluster_metadata,
    read_cluster_metadata,
    reference,
)
from kbackup.format.encryption import BackupKeys
from kbackup.format.manifest import ClusterMetadataRef, Manifest
from kbackup.storage import open_storage

DOC = (Path(__file__).parents[2] / "docs" / "format.md").read_text()
EXAMPLES = re.findall(r"```json\n(.*?)\n```", DOC, re.DOTALL)
#: The manifest's example comes first (test_format_doc.py); the cluster-metadata file's names its format.
MANIFEST_EXAMPLE = EXAMPLES[0]
[EXAMPLE] = [block for block in EXAMPLES if '"format": "kafka-backup-cluster-metadata"' in block]
KEYS = BackupKeys("nightly", 1, "local:test", bytes(range(32)))
KEY = cluster_metadata_key(1, "20261122T031500Z-5b1f09aa", "3f9d2c1e")


def example() -> ClusterMetadata:
    return ClusterMetadata.model_validate_json(EXAMPLE)


def read(
    data: bytes, ref: ClusterMetadataRef, keys: BackupKeys | None = None, increment: int = 1
) -> ClusterMetadata:
    return parse_cluster_metadata(
        data, ref, backup_id="nightly", increment=increment, run_id="20261122T031500Z-5b1f09aa", keys=keys
    )


def test_the_documented_example_uses_every_field_and_reads_back() -> None:
    raw = json.loads(EXAMPLE)
    metadata = example()
    assert set(raw) == set(ClusterMetadata.model_fields)
    assert set(raw["acls"]["bindings"][0]) == set(type(metadata.acls.bindings[0]).model_fields)
    assert set(raw["broker_configs"]) == set(type(metadata.broker_configs).model_fields)
    assert {binding.pattern_type for binding in metadata.acls.bindings} == {"LITERAL", "PREFIXED"}
    [sensitive] = metadata.broker_configs.brokers[0].configs
    assert (sensitive.value, sensitive.sensitive) == (None, True)


@pytest.mark.parametrize("keys", [None, KEYS], ids=["plain", "sealed"])
def test_a_file_reads_back_as_written(keys: BackupKeys | None) -> None:
    metadata = example()
    data = encode_cluster_metadata(metadata, keys)
    ref = reference(metadata, KEY, data)
    assert read(data, ref, keys) == metadata
    assert ref.kinds() == {
        "acls": {"status": "captured", "count": 2},
        "scram_users": {"status": "captured", "count": 1},
        "broker_configs": {"status": "captured", "count": 2},
    }
    if keys is not None:
        # Sealed: which file it is shows, nothing of what it holds.
        assert b"order-app" not in data
        assert b"log.cleaner" not in data
        assert b'"increment": 1' in data


def test_a_newer_version_is_refused_in_one_line() -> None:
    raw = json.loads(EXAMPLE)
    raw["format_version"] = 2
    data = json.dumps(raw).encode()
    with pytest.raises(
        BackupIntegrityError, match="has format version 2, this kafka-backup reads versions up to 1"
    ) as caught:
        read(data, reference(example(), KEY, data))
    assert "\n" not in caught.value.message
    assert caught.value.hint == "upgrade kafka-backup to read this backup"


def test_a_file_changed_swapped_or_without_its_key_is_refused() -> None:
    metadata = example()
    plain = encode_cluster_metadata(metadata, None)
    sealed = encode_cluster_metadata(metadata, KEYS)
    with pytest.raises(BackupIntegrityError, match="does not match its manifest"):
        read(plain.replace(b"READ", b"WRITE"), reference(metadata, KEY, plain))
    # Another increment's file under this manifest (its checksum rewritten to match).
    other = encode_cluster_metadata(metadata.model_copy(update={"increment": 2}), None)
    with pytest.raises(BackupIntegrityError, match="belongs to backup nightly increment 2"):
        read(other, reference(metadata, KEY, other))
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        read(sealed, reference(metadata, KEY, sealed), KEYS, increment=2)
    with pytest.raises(EncryptionKeyError, match="is encrypted"):
        read(sealed, reference(metadata, KEY, sealed))
    with pytest.raises(BackupIntegrityError, match="not encrypted, in a backup that is"):
        read(plain, reference(metadata, KEY, plain), KEYS)


def _damaged(valid: bytes, draw: st.DataObject) -> bytes:
    kind = draw.draw(st.sampled_from(["cut", "flip", "insert", "value"]))
    where = draw.draw(st.integers(0, len(valid)))
    if kind == "cut":
        return valid[:where]
    if kind == "flip":
        return valid[:where] + bytes([draw.draw(st.integers(0, 255))]) + valid[where + 1 :]
    if kind == "insert":
        token = draw.draw(st.sampled_from([b"\x00", b"\xff", b"\\ud800", b"9" * 5000, b"[" * 5000, b"\r"]))
        return valid[:where] + token + valid[where:]
    raw = json.loads(valid)
    section = draw.draw(
        st.sampled_from(["acls", "scram_users", "broker_configs", "increment", "format_version"])
    )
    raw[section] = draw.draw(
        st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()), st.just({}))
    )
    return json.dumps(raw).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_bytes_read_as_a_file_or_one_project_error(data: st.DataObject) -> None:
    """Its checksum rewritten to match (a plain backup's manifest can be rewritten too), damaged bytes
    still read as a valid document or a project error with a message, never another exception."""
    damaged = _damaged(encode_cluster_metadata(example(), None), data)
    outcome = _outcome(damaged)
    if isinstance(outcome, KBackupError):
        assert outcome.message
        assert "\n" not in outcome.message.strip()
    else:
        assert outcome.format_version == 1
        assert (outcome.backup_id, outcome.increment) == ("nightly", 1)


def _outcome(damaged: bytes) -> ClusterMetadata | KBackupError:
    try:
        return read(damaged, reference(example(), KEY, damaged))
    except KBackupError as error:
        return error


def test_a_stored_file_reads_back_through_the_manifest_that_names_it(tmp_path: Path) -> None:
    """Written as a backup run writes it (create-if-absent, a name of its own), read as a restore
    will read it: sealed in an encrypted backup, and an increment without one has none."""
    storage = open_storage(str(tmp_path))
    metadata = example().model_copy(update={"backup_id": "nightly"})
    ref = write_cluster_metadata(storage, metadata, KEYS)
    again = write_cluster_metadata(storage, metadata, KEYS)
    assert ref.key != again.key
    manifest = Manifest.model_validate_json(MANIFEST_EXAMPLE).model_copy(
        update={"cluster_metadata": ref, "run_id": metadata.run_id, "increment": 1, "backup_id": "nightly"}
    )
    assert read_cluster_metadata(storage, manifest, KEYS) == metadata
    assert b"order-app" not in (tmp_path / "nightly" / ref.key).read_bytes()
    assert (
        read_cluster_metadata(storage, manifest.model_copy(update={"cluster_metadata": None}), KEYS) is None
    )
