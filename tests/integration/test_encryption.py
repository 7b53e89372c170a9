"""Encrypted backups on real Kafka, a folder, moto's S3 and KMS server, fake-gcs-server and Azurite:
the round trip, no plaintext at rest, tampering, bad keys, re-keying (also killed), validate without
the key."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.encryption import keyring_generations, keys_for_new_backup
from kbackup.format.layout import manifest_key
from kbackup.format.segments import open_segment
from kbackup.sandbox.emulators import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, take_backup
from tests.support.config_files import config_file
from tests.support.encryption_keys import new_key, spec
from tests.support.folders import folder_bytes
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, group_position, produce
from tests.support.oracles import reference_position
from tests.support.restore_checks import REPO
from tests.support.restored_topics import restored_records
from tests.support.storage_backends import StorageBackend, storage_backend

ORIGIN_PREFIX = "x-kafka-backup-"


def marked_records(marker: bytes, count: int, partitions: int) -> list[Record]:
    """The marker in every key, value and header value, among other bytes."""
    return [
        Record(
            key=b"key-" + marker + b"-%d" % i,
            value=b"value %d " % i + marker + os.urandom(16).hex().encode(),
            headers=(("trace", marker + b"-%d" % i), ("plain", b"x")),
            partition=i % partitions,
        )
        for i in range(count)
    ]


def s3_bytes(server: S3Server, prefix: str) -> Iterator[tuple[str, bytes]]:
    client = server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=TEST_BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            yield item["Key"], client.get_object(Bucket=TEST_BUCKET, Key=item["Key"])["Body"].read()


def kms_key(server: S3Server) -> str:
    import boto3

    kms = boto3.client(
        "kms",
        endpoint_url=server.endpoint_url,
        region_name=S3_REGION,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
    )
    return str(kms.create_key(Description="kafka-backup test")["KeyMetadata"]["Arn"])


def without_origin(records: list[Record]) -> list[tuple[Any, ...]]:
    return [
        (r.partition, r.key, r.value, tuple(h for h in r.headers if not h[0].startswith(ORIGIN_PREFIX)))
        for r in records
    ]


def topics_of(cluster: LocalKafkaCluster) -> set[str]:
    return set(AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10).topics)


@pytest.mark.parametrize("where", ["folder-keyfile", "s3-kms", "gcs-keyfile", "azure-keyfile"])
def test_encrypted_backup_restores_the_same_records_and_stores_no_plaintext(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """Parquet Modular Encryption is the same on every backend: a key file on each, and S3's KMS
    (Cloud KMS and Key Vault have no emulator to prove a key provider on: docs/security.md)."""
    marker = b"KBMARK" + uuid.uuid4().hex.encode()
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=3)
    records = marked_records(marker, 300, 3)
    produce(source_cluster, topic, records)
    group = f"{unique_name}-{marker.decode()}"  # a group id is in the manifests' snapshot
    commit_group(source_cluster, group, {(topic, 0): 40, (topic, 1): 100})
    backend, key_kind = where.split("-")
    location = f"enc-{uuid.uuid4().hex[:8]}"
    plain_at = storage_backend(backend, request, tmp_path, f"{location}-plain")
    stored_at = storage_backend(backend, request, tmp_path, location)
    if key_kind == "kms":
        encryption = {"kms_key_id": kms_key(request.getfixturevalue("s3_server"))}
    else:
        encryption = {"key_file": str(new_key(tmp_path).key_file)}
    encrypted_section = {**stored_at.section, "encryption": encryption}
    encrypted = StorageSettings.model_validate(encrypted_section)
    # Uncompressed, so that the plaintext backup's segments hold the marker as it is (zstd would
    # also hide it from a byte search: its literals are entropy-coded).
    take_backup(source_cluster, plain_at.settings(), "nightly", [topic], compression="none")
    take_backup(source_cluster, encrypted, "nightly", [topic], compression="none")
    # The search can fail: the plaintext backup holds the marker in its segments and manifest.
    plain_objects = plain_at.objects()
    assert any(marker in data for name, data in plain_objects.items() if name.endswith(".parquet"))
    assert any(marker in data for name, data in plain_objects.items() if "/manifests/" in name)
    objects = stored_at.objects()
    assert any(name.endswith("keys/00000001.json") for name in objects)
    found = [name for name, data in objects.items() if marker in data or marker.hex().encode() in data]
    assert found == [], f"plaintext marker in {found}"
    # Read back through the format's readers: every record as the source holds it.
    assert without_origin(read_backup(encrypted, "nightly")) == without_origin(
        consume_all(source_cluster, topic, [0, 1, 2])
    )
    described = BackupCatalog(open_storage(encrypted)).load("nightly")
    assert described.consumer_groups is not None
    assert [g.group_id for g in described.consumer_groups.groups] == [group]
    # Restore with the CLI into the target, under another name.
    config = config_file(
        tmp_path / "restore.yaml",
        backup_id="nightly",
        storage=encrypted_section,
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        restore={"topic_mapping": {topic: f"{topic}-restored"}},
    )
    result = subprocess.run(
        [sys.executable, "-m", "kbackup", "restore", "-c", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert without_origin(consume_all(target_cluster, f"{topic}-restored", [0, 1, 2])) == without_origin(
        consume_all(source_cluster, topic, [0, 1, 2])
    )
    # Neither the key nor a secret of the config is in what the commands printed.
    key_text = Path(encryption["key_file"]).read_text().strip() if "key_file" in encryption else ""
    for secret in filter(None, (key_text, *stored_at.secrets)):
        assert secret not in result.stdout + result.stderr
    assert_tampering_is_refused(stored_at, described, config, capsys)


def assert_tampering_is_refused(
    stored_at: StorageBackend, backup: Backup, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Objects replaced in the bucket with the cloud's own client (past kafka-backup): validate
    --deep refuses a flipped byte in a segment and a changed field of the manifest, on each backend
    as on the folder (test_tampering_is_detected_before_the_target_is_touched has every case)."""
    segment_name = f"nightly/{backup.manifests[0].segments[-1].key}"
    manifest_name = manifest_key("nightly", 0)
    pristine = stored_at.objects()
    segment = bytearray(pristine[segment_name])
    segment[len(segment) // 2] ^= 0x20
    manifest = json.loads(pristine[manifest_name])
    manifest["segments"][0]["record_count"] += 1
    for name, data, expected in (
        (segment_name, bytes(segment), f"segment {segment_name} fails its SHA-256 check"),
        (manifest_name, json.dumps(manifest).encode(), f"manifest {manifest_name} fails authentication"),
    ):
        stored_at.replace_object(name, data)
        capsys.readouterr()
        assert run(["validate", "--deep", "-c", str(config)]) == BackupIntegrityError.exit_code
        assert expected in capsys.readouterr().err
        stored_at.replace_object(name, pristine[name])
    assert run(["validate", "--deep", "-c", str(config)]) == 0


def test_drill_with_encryption_moves_every_group_exactly(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The drill (backup, restore, mapping, three-phase reset, proof) on an encrypted backup places
    each group where the reference formula says, as it does without encryption."""
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i, partition=i % 2) for i in range(80)])
    group = f"{unique_name}-app"
    committed = {(topic, 0): 17, (topic, 1): 40}
    commit_group(source_cluster, group, committed)
    key = new_key(tmp_path)
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="drill",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(tmp_path / "store")},
        three_phase={"build_mapping": "when-needed"},
        offset_reset={"groups": [group]},
    )
    report = tmp_path / "report.json"
    code = run(["drill", "-c", str(config), "--report", str(report), "--encryption-key", spec(key)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(report.read_text())["passed"] is True
    assert keyring_generations(open_storage(str(tmp_path / "store")), "drill")  # it was encrypted
    drill_topic = f"drill.{topic}"
    for p in (0, 1):
        records = restored_records(target_cluster, drill_topic, p, source_cluster.cluster_id)
        expected = reference_position(records, {(topic, p): committed[(topic, p)]})
        assert group_position(target_cluster, f"drill.{group}", drill_topic, p) == expected, p


@pytest.fixture
def two_increments(source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path) -> dict[str, Any]:
    """An encrypted backup on a folder: two increments, several segments per partition."""
    topic = f"{unique_name}-t"
    create_topic(source_cluster, topic, partitions=2)
    key = new_key(tmp_path)
    settings = StorageSettings(url=str(tmp_path / "store"), encryption=key)
    produce(
        source_cluster, topic, [Record(key=b"k%d" % i, value=b"v" * 50, partition=i % 2) for i in range(200)]
    )
    take_backup(source_cluster, settings, "nightly", [topic], segment_max_records=25)
    produce(
        source_cluster, topic, [Record(key=b"n%d" % i, value=b"w" * 50, partition=i % 2) for i in range(100)]
    )
    take_backup(source_cluster, settings, "nightly", [topic], segment_max_records=25)
    return {"topic": topic, "key": key, "settings": settings, "root": tmp_path / "store"}


def restore_args(backup: dict[str, Any], cluster: LocalKafkaCluster, *extra: str) -> list[str]:
    return [
        "-p", str(backup["root"]), "--backup-id", "nightly", "-b", cluster.bootstrap_servers,
        "--topic", backup["topic"], *extra,
    ]  # fmt: skip


def restore_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``kafka-backup restore ARGS`` in this process (the same parser and error handler as the
    command, without a Python start-up per case); its exit code and stderr."""
    capsys.readouterr()
    code = run(["restore", *args])
    return code, capsys.readouterr().err


def test_tampering_is_detected_before_the_target_is_touched(
    two_increments: dict[str, Any],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backup, root = two_increments, two_increments["root"]
    storage = open_storage(backup["settings"])
    loaded = BackupCatalog(storage).load("nightly")
    first, second = (m.segments for m in loaded.manifests)
    pristine = {name: data for name, data in folder_bytes(root)}

    def reset() -> None:
        for name, data in pristine.items():
            (root / name).write_bytes(data)

    def refused(expected: str) -> None:
        before = topics_of(target_cluster)
        code, err = restore_in_process(
            capsys, *restore_args(backup, target_cluster, "--encryption-key", spec(backup["key"]))
        )
        assert code == BackupIntegrityError.exit_code, err
        assert expected in err, err
        assert len([line for line in err.splitlines() if "error:" in line]) == 1
        assert topics_of(target_cluster) == before
        reset()

    # A flipped byte in the middle of a segment (the second increment's, read last).
    victim = root / "nightly" / second[-1].key
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x20
    victim.write_bytes(bytes(data))
    refused(f"segment nightly/{second[-1].key} fails its SHA-256 check")
    # Two segments of one partition swapped.
    a, b = [segment for segment in first if segment.partition == 0][:2]
    path_a, path_b = root / "nightly" / a.key, root / "nightly" / b.key
    bytes_a, bytes_b = path_a.read_bytes(), path_b.read_bytes()
    path_a.write_bytes(bytes_b)
    path_b.write_bytes(bytes_a)
    refused(f"segment nightly/{a.key}")
    # Even with the checksums left aside, the swapped file names the object it was written as.
    path_a.write_bytes(bytes_b)
    with (
        pytest.raises(BackupIntegrityError, match=f"was written as {b.key}"),
        open_segment(storage, "nightly", a, verify=False, keys=loaded.keys),
    ):
        pass
    reset()
    # The older manifest replayed as the newer one.
    (root / manifest_key("nightly", 1)).write_bytes((root / manifest_key("nightly", 0)).read_bytes())
    refused("manifest nightly/manifests/00000001.json fails authentication")
    # A visible field changed (a segment's record count).
    raw = json.loads((root / manifest_key("nightly", 1)).read_bytes())
    raw["segments"][0]["record_count"] += 1
    (root / manifest_key("nightly", 1)).write_text(json.dumps(raw))
    refused("manifest nightly/manifests/00000001.json fails authentication")
    # A plaintext manifest put in place of an encrypted one.
    raw = json.loads((root / manifest_key("nightly", 1)).read_bytes())
    raw["format_version"] = 1
    del raw["sealed"]
    (root / manifest_key("nightly", 1)).write_text(json.dumps(raw))
    refused("is not encrypted, in a backup that is")
    # Each case was undone after it was refused: the backup reads whole again.
    assert len(read_backup(backup["settings"], "nightly")) == 300


def test_a_segment_of_another_backup_does_not_open_in_this_one(
    source_cluster: LocalKafkaCluster, two_increments: dict[str, Any]
) -> None:
    backup, root = two_increments, two_increments["root"]
    take_backup(source_cluster, backup["settings"], "other", [backup["topic"]], segment_max_records=25)
    storage = open_storage(backup["settings"])
    nightly = BackupCatalog(storage).load("nightly")
    other = BackupCatalog(storage).load("other")
    mine, theirs = nightly.manifests[0].segments[0], other.manifests[0].segments[0]
    (root / "nightly" / mine.key).write_bytes((root / "other" / theirs.key).read_bytes())
    with (
        pytest.raises(BackupIntegrityError, match=r"fails its SHA-256 check|truncated or replaced"),
        open_segment(storage, "nightly", mine, keys=nightly.keys),
    ):
        pass
    # Without the checksum, its Parquet master key is another backup's.
    with (
        pytest.raises(BackupIntegrityError, match="does not decrypt with backup nightly's key"),
        open_segment(storage, "nightly", mine, verify=False, keys=nightly.keys),
    ):
        pass


def test_validate_without_the_key_checks_checksums_and_with_it_every_record(
    two_increments: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    backup, root = two_increments, str(two_increments["root"])
    key = spec(backup["key"])
    assert run(["validate", "-p", root, "--backup-id", "nightly", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["encrypted"] is True
    assert report["contents_checked"] is False
    segments = sum(
        len(m.segments) for m in BackupCatalog(open_storage(backup["settings"])).load("nightly").manifests
    )
    assert report["segments_checked"] == segments
    assert report["records"] == 300
    assert (
        run(["validate", "-p", root, "--backup-id", "nightly", "--deep", "--encryption-key", key, "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["contents_checked"] is True
    assert report["segments_checked"] == segments
    # --deep needs the key.
    assert run(["validate", "-p", root, "--backup-id", "nightly", "--deep"]) == EncryptionKeyError.exit_code
    assert "--deep decrypts every record" in capsys.readouterr().err
    # A flipped byte: found without the key, by the ciphertext checksum.
    manifest = BackupCatalog(open_storage(backup["settings"])).load("nightly").manifests[0]
    victim = Path(root) / "nightly" / manifest.segments[3].key
    data = bytearray(victim.read_bytes())
    data[-30] ^= 0x01
    victim.write_bytes(bytes(data))
    assert run(["validate", "-p", root, "--backup-id", "nightly"]) == BackupIntegrityError.exit_code
    assert f"segment nightly/{manifest.segments[3].key} fails its SHA-256 check" in capsys.readouterr().err


def test_bad_keys_get_one_line_and_exit_18_and_the_target_stays_untouched(
    source_cluster: LocalKafkaCluster,
    two_increments: dict[str, Any],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    s3_server: S3Server,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backup = two_increments
    wrong = new_key(tmp_path, "wrong.key")

    def refused(*extra: str, expected: str) -> str:
        before = topics_of(target_cluster)
        code, err = restore_in_process(capsys, *restore_args(backup, target_cluster, *extra))
        assert code == EncryptionKeyError.exit_code, err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1, err
        assert expected in errors[0], err
        assert topics_of(target_cluster) == before
        return err

    refused(expected="backup nightly in")  # no key configured: it says the backup is encrypted
    refused("--encryption-key", spec(wrong), expected="is encrypted with file")
    refused("--encryption-key", f"file:{tmp_path / 'absent.key'}", expected="absent.key does not exist")
    refused(
        "--encryption-key",
        "env:KBACKUP_TEST_UNSET_VARIABLE",
        expected="KBACKUP_TEST_UNSET_VARIABLE is not set",
    )
    (tmp_path / "short.key").write_text("c2hvcnQ=\n")
    refused("--encryption-key", f"file:{tmp_path / 'short.key'}", expected="does not hold a 256-bit key")
    # A KMS key on an unencrypted-by-KMS backup: KMS is never asked for a local key's wrap.
    refused("--encryption-key", "kms:alias/nothing", expected="is encrypted with file")
    # KMS: a key that does not exist refuses the backup before it writes anything; one that cannot
    # be reached is a retryable error.
    base = s3_server.storage_settings(TEST_BUCKET, f"kms-{uuid.uuid4().hex[:8]}")
    missing = StorageSettings.model_validate(
        {**base, "encryption": {"kms_key_id": "alias/kafka-backup-none"}}
    )
    with pytest.raises(EncryptionKeyError, match="NotFoundException"):
        keys_for_new_backup(open_storage(missing), "nightly")
    assert list(s3_bytes(s3_server, base["url"].split("/", 3)[3] + "/")) == []
    # A backup wrapped by one KMS key: a restore with another KMS key, or with KMS out of reach,
    # refuses before the target is touched (exit 18; out of reach is retryable).
    wrapped_by = kms_key(s3_server)
    kms_store = StorageSettings.model_validate({**base, "encryption": {"kms_key_id": wrapped_by}})
    take_backup(source_cluster, kms_store, "nightly", [backup["topic"]])

    def kms_restore(encryption: dict[str, str]) -> dict[str, Any]:
        config = config_file(
            tmp_path / "kms-restore.yaml",
            backup_id="nightly",
            storage={**base, "encryption": encryption},
            target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
            restore={"topics": [backup["topic"]]},
        )
        before = topics_of(target_cluster)
        result = subprocess.run(
            [sys.executable, "-m", "kbackup", "restore", "-c", str(config), "--json"],
            capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
            env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        )  # fmt: skip
        assert result.returncode == EncryptionKeyError.exit_code, result.stderr
        assert topics_of(target_cluster) == before
        assert S3_SECRET_KEY not in result.stdout + result.stderr
        error: dict[str, Any] = json.loads(result.stdout)["error"]
        return error

    refused_by_kms = kms_restore({"kms_key_id": kms_key(s3_server)})
    assert "refused to open the backup key" in refused_by_kms["message"]
    assert refused_by_kms["retryable"] is False
    out_of_reach = kms_restore(
        {"kms_key_id": wrapped_by, "kms_endpoint_url": f"http://127.0.0.1:{free_port()}"}
    )
    assert "cannot be reached" in out_of_reach["message"]
    assert out_of_reach["retryable"] is True


def test_a_plaintext_backup_is_not_read_with_a_key_configured(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"{unique_name}-t"
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    take_backup(source_cluster, tmp_path / "store", "nightly", [topic])
    key = spec(new_key(tmp_path))
    assert (
        run(["describe", "-p", str(tmp_path / "store"), "--backup-id", "nightly", "--encryption-key", key])
        == 18
    )
    assert "is not encrypted, but a key is configured" in capsys.readouterr().err
    # A backup run with a key does not continue it in plaintext or mix the two.
    settings = StorageSettings(url=str(tmp_path / "store"), encryption=EncryptionSettings(key_file=key[5:]))
    with pytest.raises(EncryptionKeyError, match="is not encrypted"):
        take_backup(source_cluster, settings, "nightly", [topic])
    # A mixed root: list shows both, and says which one it could not read.
    take_backup(source_cluster, settings, "secure", [topic])
    capsys.readouterr()
    for configured, readable, not_read in ((None, "nightly", "secure"), (key, "secure", "nightly")):
        assert (
            run(
                [
                    "list",
                    "-p",
                    str(tmp_path / "store"),
                    "--json",
                    *(["--encryption-key", configured] if configured else []),
                ]
            )
            == 0
        )
        rows = {row["backup_id"]: row for row in json.loads(capsys.readouterr().out)["backups"]}
        assert rows[readable]["records"] == 5
        assert rows[readable]["encrypted"] is (readable == "secure")
        assert "locked" in rows[not_read]
        assert rows[not_read]["encrypted"] is (not_read == "secure")


def digests(root: Path, prefix: str) -> dict[str, str]:
    return {
        name: hashlib.sha256(data).hexdigest()
        for name, data in folder_bytes(root)
        if not name.startswith(prefix)
    }


def test_rekey_rewraps_without_rewriting_data(two_increments: dict[str, Any], tmp_path: Path) -> None:
    backup, root = two_increments, two_increments["root"]
    old, new = spec(backup["key"]), spec(new_key(tmp_path, "new.key"))
    before = digests(root, "nightly/keys/")
    base = ["-p", str(root), "--encryption-key", old, "--new-encryption-key", new]
    assert run(["rekey", *base]) == 0  # the plan only
    assert [g for g, _ in keyring_generations(open_storage(str(root)), "nightly")] == [1]
    assert run(["rekey", *base, "--execute"]) == 0
    assert [g for g, _ in keyring_generations(open_storage(str(root)), "nightly")] == [2]
    assert digests(root, "nightly/keys/") == before  # no segment or manifest was rewritten
    assert (
        run(["validate", "-p", str(root), "--backup-id", "nightly", "--deep", "--encryption-key", new]) == 0
    )
    assert run(["describe", "-p", str(root), "--backup-id", "nightly", "--encryption-key", old]) == 18


def test_rekey_killed_anywhere_leaves_every_backup_readable_with_the_old_or_the_new_key(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Twelve kills at seeded points (3 points x 4 backups, in random order of occurrence): after
    each, every backup opens with the old key or the new one; a rerun finishes the re-key."""
    topic = f"{unique_name}-t"
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"k%d" % i, value=b"v") for i in range(20)])
    old, new = new_key(tmp_path, "old.key"), new_key(tmp_path, "new.key")
    pristine = tmp_path / "pristine"
    backups = [f"b{i}" for i in range(4)]
    for backup_id in backups:
        take_backup(source_cluster, StorageSettings(url=str(pristine), encryption=old), backup_id, [topic])
    points = [
        (name, n)
        for name in ("rekey:before-commit", "rekey:committed", "rekey:older-generation-deleted")
        for n in range(1, 5)
    ]
    rng = random.Random(2025)
    chosen = rng.sample(points, 12)
    for point, occurrence in chosen:
        store = tmp_path / f"store-{point.split(':')[1]}-{occurrence}"
        shutil.copytree(pristine, store)
        command = [
            sys.executable, "-m", "kbackup", "rekey", "-p", str(store), "--encryption-key", spec(old),
            "--new-encryption-key", spec(new), "--execute",
        ]  # fmt: skip
        env = {**os.environ, "KBACKUP_CRASH_AT": f"{point}@{occurrence}", "KBACKUP_NO_PROGRESS": "1"}
        killed = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=REPO, check=False, timeout=120
        )
        assert killed.returncode == -9, (point, occurrence, killed.stderr)
        for backup_id in backups:
            opened = []
            for key in (old, new):
                with contextlib.suppress(EncryptionKeyError):
                    opened.append(
                        len(read_backup(StorageSettings(url=str(store), encryption=key), backup_id))
                    )
            assert opened, (point, occurrence, backup_id)
            assert set(opened) == {20}, (point, occurrence, backup_id)
        # Run again: it re-keys what the kill left, and deletes what it left behind.
        assert run(command[3:]) == 0  # in this process: no crash point is set here
        for backup_id in backups:
            assert len(keyring_generations(open_storage(str(store)), backup_id)) == 1
            assert len(read_backup(StorageSettings(url=str(store), encryption=new), backup_id)) == 20
            with pytest.raises(EncryptionKeyError):
                BackupCatalog(open_storage(StorageSettings(url=str(store), encryption=old))).load(backup_id)
        shutil.rmtree(store)
