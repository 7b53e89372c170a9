"""Storage class / access tier and server-side encryption on write, on each cloud's emulator.

A backup is written through the format's own writer (segments by ``move_file``, the manifest and
its group snapshot by a create-if-absent put) and a lease through the backup's lease keeper; then
the plain SDK client reads each object's properties: the segments carry the configured class, the
manifest and lease the store's default, and every object the encryption setting.

Where an emulator keeps an option, its stored property is what is checked (moto: StorageClass,
ServerSideEncryption, SSEKMSKeyId; fake-gcs-server: storageClass; Azurite: the access tier). Where
it drops one (fake-gcs-server forgets ``kmsKeyName``; Azurite keeps no encryption scope), what the
client library sent is read from the wire through a recording proxy in front of the emulator.
A segment big enough to go up in parts (S3 multipart, a resumable upload, Azure blocks) is checked
on its own: each client sends those as a request sequence of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kbackup.backup.lease import LeaseKeeper
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.emulators import AZURITE_ACCOUNT, Azurite, GcsServer, S3Server
from kbackup.storage import Storage, open_storage
from kbackup.storage import azure as azure_backend
from kbackup.storage import s3 as s3_backend
from tests.conftest import TEST_BUCKET
from tests.support.backup_builder import write_increment
from tests.support.backup_io import read_backup
from tests.support.recording_proxy import RecordingProxy

BACKUP_ID = "b"
RECORDS = 10
CMEK_KEY = "projects/kbackup-test/locations/europe-west1/keyRings/backups/cryptoKeys/segments"
ENCRYPTION_SCOPE = "kbackup-scope"
MIB = 1024 * 1024


def open_with(settings: Mapping[str, object]) -> Storage:
    return open_storage(StorageSettings.model_validate(settings))


def write_backup(storage: Storage, scratch: Path) -> None:
    """Two segments (7 records each at most), a manifest with a group snapshot, and a lease; then
    every record read back, so a class that needs a restore before a read would fail here."""
    write_increment(storage, scratch, 0, {0: (0, RECORDS)}, groups={"g": {0: 5}}, backup_id=BACKUP_ID)
    LeaseKeeper(storage, BACKUP_ID, "run0").renew()
    assert [record.offset for record in read_backup(storage, BACKUP_ID)] == list(range(RECORDS))


def split_by_kind(names: list[str]) -> tuple[list[str], list[str]]:
    """(segments, everything else), each present: a test of one kind alone would prove nothing."""
    segments = [name for name in names if name.endswith(".parquet")]
    others = [name for name in names if not name.endswith(".parquet")]
    assert len(segments) == 2, names
    assert any("/manifests/" in name for name in others), names
    assert any("/leases/" in name for name in others), names
    return segments, others


@pytest.fixture
def proxy_to_gcs(gcs_server: GcsServer) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(gcs_server.port)
    yield proxy
    proxy.close()


@pytest.fixture
def proxy_to_azurite(azurite: Azurite) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(azurite.port)
    yield proxy
    proxy.close()


def test_s3_segments_get_the_storage_class_and_every_object_the_kms_key(
    s3_server: S3Server, unique_name: str, tmp_path: Path
) -> None:
    key_id = "arn:aws:kms:us-east-1:123456789012:key/kbackup-test"
    storage = open_with(
        {
            **s3_server.storage_settings(TEST_BUCKET, unique_name),
            "storage_class": "STANDARD_IA",
            "sse": "aws:kms",
            "sse_kms_key_id": key_id,
        }
    )
    write_backup(storage, tmp_path)
    client = s3_server.client()
    listed = client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"{unique_name}/")["Contents"]
    classes = {item["Key"]: item["StorageClass"] for item in listed}
    segments, others = split_by_kind(sorted(classes))
    assert {classes[name] for name in segments} == {"STANDARD_IA"}
    assert {classes[name] for name in others} == {"STANDARD"}
    for name in classes:
        head = client.head_object(Bucket=TEST_BUCKET, Key=name)
        assert (head.get("ServerSideEncryption"), head.get("SSEKMSKeyId")) == ("aws:kms", key_id), name


def test_gcs_segments_get_the_storage_class_and_every_upload_the_cmek_key(
    gcs_server: GcsServer, proxy_to_gcs: RecordingProxy, unique_name: str, tmp_path: Path
) -> None:
    storage = open_with(
        {
            "url": f"gs://{TEST_BUCKET}/{unique_name}",
            "gcs": {
                "endpoint_url": proxy_to_gcs.endpoint_url,
                "anonymous": True,
                "storage_class": "COLDLINE",
                "kms_key_name": CMEK_KEY,
            },
        }
    )
    write_backup(storage, tmp_path)
    blobs = {
        blob.name: blob for blob in gcs_server.client().list_blobs(TEST_BUCKET, prefix=f"{unique_name}/")
    }
    segments, others = split_by_kind(sorted(blobs))
    assert {blobs[name].storage_class for name in segments} == {"COLDLINE"}
    assert {blobs[name].storage_class for name in others} == {"STANDARD"}
    # fake-gcs-server stores no kmsKeyName: each upload request is read as it went on the wire.
    uploads = [request for request in proxy_to_gcs.requests() if request.target.startswith("/upload/")]
    assert len(uploads) >= len(blobs)
    for upload in uploads:
        assert parse_qs(urlsplit(upload.target).query).get("kmsKeyName") == [CMEK_KEY], upload.target


def test_azure_segments_get_the_access_tier_and_every_blob_the_encryption_scope(
    azurite: Azurite, proxy_to_azurite: RecordingProxy, unique_name: str, tmp_path: Path
) -> None:
    settings = azurite.storage_settings(TEST_BUCKET, unique_name)
    settings["azure"] = {
        **settings["azure"],
        "endpoint": f"{proxy_to_azurite.endpoint_url}/{AZURITE_ACCOUNT}",
        "access_tier": "Cool",
        "encryption_scope": ENCRYPTION_SCOPE,
    }
    storage = open_with(settings)
    write_backup(storage, tmp_path)
    container = azurite.service().get_container_client(TEST_BUCKET)
    blobs = {blob.name: blob for blob in container.list_blobs(name_starts_with=f"{unique_name}/")}
    segments, others = split_by_kind(sorted(blobs))
    assert {(blobs[name].blob_tier, bool(blobs[name].blob_tier_inferred)) for name in segments} == {
        ("Cool", False)
    }
    # No tier set on the blob: the account's default applies (Azurite says Hot, inferred).
    assert {blobs[name].blob_tier_inferred for name in others} == {True}
    # Azurite keeps no encryption scope: each blob write is read as it went on the wire.
    writes = [
        request
        for request in proxy_to_azurite.requests()
        if request.method == "PUT" and f"/{TEST_BUCKET}/{unique_name}/" in request.target
    ]
    assert len(writes) >= len(blobs)
    for write in writes:
        assert write.headers.get("x-ms-encryption-scope") == ENCRYPTION_SCOPE, write.target


def big_segment(folder: Path, size: int) -> Path:
    path = folder / "big.parquet"
    path.write_bytes(b"x" * size)
    return path


# Real segments are tens of MiB: each client then sends them in parts (S3 multipart, a Cloud Storage
# resumable upload, Azure blocks), a request sequence of its own, which must carry the options too.
def test_s3_a_segment_sent_in_parts_carries_the_class_and_kms_key(
    s3_server: S3Server, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_backend, "MULTIPART_THRESHOLD", 5 * MIB)  # S3's smallest part
    storage = open_with(
        {
            **s3_server.storage_settings(TEST_BUCKET, unique_name),
            "storage_class": "ONEZONE_IA",
            "sse": "aws:kms",
            "sse_kms_key_id": "alias/kbackup-test",
        }
    )
    storage.move_file("big.parquet", big_segment(tmp_path, 6 * MIB))
    head = s3_server.client().head_object(Bucket=TEST_BUCKET, Key=f"{unique_name}/big.parquet")
    assert head["ETag"].endswith('-1"')  # a multipart upload's ETag counts its parts
    assert (head["StorageClass"], head["SSEKMSKeyId"]) == ("ONEZONE_IA", "alias/kbackup-test")


def test_gcs_a_segment_sent_resumably_carries_the_class_and_cmek_key(
    gcs_server: GcsServer, proxy_to_gcs: RecordingProxy, unique_name: str, tmp_path: Path
) -> None:
    settings = {"endpoint_url": proxy_to_gcs.endpoint_url, "anonymous": True}
    storage = open_with(
        {
            "url": f"gs://{TEST_BUCKET}/{unique_name}",
            "gcs": {**settings, "storage_class": "NEARLINE", "kms_key_name": CMEK_KEY},
        }
    )
    storage.move_file("big.parquet", big_segment(tmp_path, 8 * MIB + 1))  # above the client's 8 MiB
    blob = gcs_server.client().bucket(TEST_BUCKET).get_blob(f"{unique_name}/big.parquet")
    assert (blob.size, blob.storage_class) == (8 * MIB + 1, "NEARLINE")
    starts = [
        parse_qs(urlsplit(request.target).query)
        for request in proxy_to_gcs.requests()
        if request.method == "POST" and "uploadType=resumable" in request.target
    ]
    assert [query.get("kmsKeyName") for query in starts] == [[CMEK_KEY]]


def test_azure_a_segment_sent_in_blocks_carries_the_tier_and_encryption_scope(
    azurite: Azurite,
    proxy_to_azurite: RecordingProxy,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(azure_backend, "SINGLE_PUT_SIZE", MIB)
    monkeypatch.setattr(azure_backend, "BLOCK_SIZE", MIB)
    settings = azurite.storage_settings(TEST_BUCKET, unique_name)
    settings["azure"] = {
        **settings["azure"],
        "endpoint": f"{proxy_to_azurite.endpoint_url}/{AZURITE_ACCOUNT}",
        "access_tier": "Cold",
        "encryption_scope": ENCRYPTION_SCOPE,
    }
    open_with(settings).move_file("big.parquet", big_segment(tmp_path, 2 * MIB + MIB // 2))
    blob = azurite.service().get_blob_client(TEST_BUCKET, f"{unique_name}/big.parquet")
    assert blob.get_blob_properties().blob_tier == "Cold"
    assert len(blob.get_block_list("committed")[0]) == 3
    writes = [request for request in proxy_to_azurite.requests() if request.method == "PUT"]
    assert {request.target.rpartition("comp=")[2].partition("&")[0] for request in writes} == {
        "block",
        "blocklist",
    }
    assert {request.headers.get("x-ms-encryption-scope") for request in writes} == {ENCRYPTION_SCOPE}


@pytest.mark.parametrize("cloud", ["gcs", "azure"])
def test_a_failed_write_does_not_print_the_encryption_setting(
    cloud: str, gcs_server: GcsServer, azurite: Azurite
) -> None:
    """As S3's sse_kms_key_id: a key's name is not a secret, but an error has no need of it."""
    if cloud == "gcs":
        settings = gcs_server.storage_settings("no-such-bucket", "x")
        settings["gcs"] = {**settings["gcs"], "kms_key_name": CMEK_KEY}
        name = CMEK_KEY
    else:
        settings = azurite.storage_settings("no-such-container", "x")
        settings["azure"] = {**settings["azure"], "encryption_scope": ENCRYPTION_SCOPE}
        name = ENCRYPTION_SCOPE
    with pytest.raises(StorageError) as caught:
        open_with(settings).check_writable()
    assert "no-such" in caught.value.message
    assert name not in caught.value.message
    assert name not in (caught.value.hint or "")
