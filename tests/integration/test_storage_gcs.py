"""The storage contract on fake-gcs-server, reached only through its endpoint URL, and the errors a
Cloud Storage user meets: a missing bucket, a store that does not answer, a bad credentials file."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from google.api_core.exceptions import PreconditionFailed

from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.emulators import GcsServer
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.storage import Storage, open_storage
from kbackup.storage import gcs as gcs_backend
from tests.conftest import TEST_BUCKET
from tests.support.cloud_round_trip import restored_equals_source, seeded_round_trip
from tests.support.config_files import config_file
from tests.support.kafka_io import consume_all
from tests.support.storage_contract import StorageContract


def open_gcs(settings: Mapping[str, object]) -> Storage:
    return open_storage(StorageSettings.model_validate(settings))


class TestGcsStorage(StorageContract):
    @pytest.fixture
    def storage(self, gcs_server: GcsServer) -> Storage:
        return open_gcs(gcs_server.storage_settings(TEST_BUCKET, f"contract-{uuid.uuid4().hex[:8]}"))


def test_the_emulator_itself_refuses_a_second_create_if_absent(gcs_server: GcsServer) -> None:
    """fake-gcs-server, not our code, keeps the first object: the contract's create-if-absent test
    on it proves what Cloud Storage does (gcp-storage-emulator overwrote the object here)."""
    blob = gcs_server.client().bucket(TEST_BUCKET).blob(f"emulator/{uuid.uuid4().hex}")
    blob.upload_from_string(b"first", if_generation_match=0, retry=None)
    with pytest.raises(PreconditionFailed):
        blob.upload_from_string(b"second", if_generation_match=0, retry=None)
    assert blob.download_as_bytes(retry=None) == b"first"


def test_object_written_through_storage_is_visible_to_the_google_client(gcs_server: GcsServer) -> None:
    storage = open_gcs(gcs_server.storage_settings(TEST_BUCKET, "plain"))
    storage.put_bytes("hello/object.txt", b"hello gcs")
    blob = gcs_server.client().bucket(TEST_BUCKET).blob("plain/hello/object.txt")
    assert blob.download_as_bytes(retry=None) == b"hello gcs"


def test_a_large_file_goes_up_resumably_and_comes_back_whole(gcs_server: GcsServer, tmp_path: Path) -> None:
    """Above 8 MiB the client streams a resumable upload from the file, in chunks."""
    storage = open_gcs(gcs_server.storage_settings(TEST_BUCKET, f"large-{uuid.uuid4().hex[:8]}"))
    source = tmp_path / "segment.parquet"
    payload = uuid.uuid4().bytes * (20 * 1024 * 1024 // 16)
    source.write_bytes(payload)
    storage.put_file("data/big.parquet", source)
    copy = tmp_path / "copy"
    storage.download("data/big.parquet", copy)
    assert copy.read_bytes() == payload


def test_listings_page(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """More objects and folders than one page holds: every page is read, in key order."""
    monkeypatch.setattr(gcs_backend, "LIST_PAGE_SIZE", 3)
    storage = open_gcs(gcs_server.storage_settings(TEST_BUCKET, f"paging-{uuid.uuid4().hex[:8]}"))
    keys = [f"b{folder}/o{index:02d}" for folder in range(4) for index in range(3)]
    for key in keys:
        storage.put_bytes(key, key.encode())
    assert [info.key for info in storage.list("")] == sorted(keys)
    assert {info.key: info.size for info in storage.list("b2/")} == {f"b2/o{i:02d}": 6 for i in range(3)}
    assert storage.list_prefixes("") == ["b0", "b1", "b2", "b3"]
    assert storage.delete_many(keys) >= 1
    assert list(storage.list("")) == []


def test_missing_bucket_is_named(gcs_server: GcsServer) -> None:
    storage = open_gcs(gcs_server.storage_settings("no-such-bucket", "x"))
    with pytest.raises(StorageError, match="bucket no-such-bucket does not exist") as caught:
        storage.check_writable()
    assert caught.value.hint == "create the bucket or fix storage.url"
    assert not caught.value.retryable
    with pytest.raises(StorageError, match="bucket no-such-bucket does not exist"):
        storage.size("manifest.json")
    with pytest.raises(StorageError, match="bucket no-such-bucket does not exist"):
        list(storage.list(""))
    with pytest.raises(StorageError, match="bucket no-such-bucket does not exist"):
        storage.get_bytes("manifest.json")


def test_an_unreachable_endpoint_is_retried_then_named(caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    settings = {
        "url": f"gs://{TEST_BUCKET}/x",
        "gcs": {"endpoint_url": endpoint, "anonymous": True},
        "max_attempts": 2,
        "retry_timeout_secs": 0,
    }
    with caplog.at_level(logging.WARNING), pytest.raises(StorageError) as caught:
        open_gcs(settings).get_bytes("manifest.json")
    assert caught.value.retryable
    assert endpoint in caught.value.message
    assert "Connection refused" in caught.value.message
    assert "\n" not in caught.value.message
    assert any("trying again" in record.getMessage() for record in caplog.records)


def test_an_endpoint_host_that_does_not_resolve_fails_at_once() -> None:
    settings = {
        "url": f"gs://{TEST_BUCKET}/x",
        "gcs": {"endpoint_url": "http://no-such-host.invalid:4443", "anonymous": True},
        "max_attempts": 5,
    }
    with pytest.raises(
        StorageError, match=r"the host of http://no-such-host\.invalid:4443 does not resolve"
    ) as caught:
        open_gcs(settings).size("manifest.json")
    assert not caught.value.retryable


def test_check_tries_an_unreachable_endpoint_once() -> None:
    settings = StorageSettings.model_validate(
        {
            "url": f"gs://{TEST_BUCKET}/x",
            "gcs": {"endpoint_url": f"http://127.0.0.1:{free_port()}", "anonymous": True},
        }
    )
    storage = open_storage(settings, check_timeout_secs=2)
    with pytest.raises(StorageError, match="check tries once, with a 2s timeout") as caught:
        storage.check_writable()
    assert not caught.value.retryable


@pytest.mark.parametrize("content", [None, "this is not json {", '{"type": "authorized_user"}'])
def test_a_bad_credentials_file_fails_at_once_naming_it(tmp_path: Path, content: str | None) -> None:
    credentials = tmp_path / "key.json"
    if content is not None:
        credentials.write_text(content)
    settings = {"url": f"gs://{TEST_BUCKET}/x", "gcs": {"credentials_file": str(credentials)}}
    with pytest.raises(StorageError) as caught:
        open_gcs(settings)
    assert str(credentials) in caught.value.message
    assert "\n" not in caught.value.message
    if content is not None:
        assert content not in caught.value.message


def test_a_service_account_key_is_never_printed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A key file whose private key does not parse: the message names the file, not what it holds."""
    secret = "kbackup-test-private-key-material-0123456789"
    credentials = tmp_path / "key.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "service_account",
                "client_email": "backup@kbackup-test.iam.gserviceaccount.com",
                "private_key": f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    settings = {"url": f"gs://{TEST_BUCKET}/x", "gcs": {"credentials_file": str(credentials)}}
    with caplog.at_level(logging.DEBUG), pytest.raises(StorageError) as caught:
        open_gcs(settings)
    assert str(credentials) in caught.value.message
    assert secret not in caught.value.message
    assert secret not in (caught.value.hint or "")
    assert secret not in caplog.text


def test_backup_validate_and_restore_through_cloud_storage(
    gcs_server: GcsServer,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The commands a user runs, end to end on the emulator: a backup lands segments and a manifest
    in the bucket, `validate --deep` reads every segment back, and a restore copies every record."""
    config = seeded_round_trip(
        source_cluster,
        target_cluster,
        unique_name,
        gcs_server.storage_settings(TEST_BUCKET, unique_name),
        tmp_path / "gcs.yaml",
        records=40,
        group_offset=3,
    )
    c = ["-c", str(config)]
    assert run(["check", "--offline", *c]) == 0, capsys.readouterr().err
    assert run(["check", *c]) == 0, capsys.readouterr().err
    assert run(["backup", *c]) == 0, capsys.readouterr().err
    names = [blob.name for blob in gcs_server.client().list_blobs(TEST_BUCKET, prefix=f"{unique_name}/")]
    assert any(name.endswith(".parquet") for name in names), names
    assert any("/manifests/" in name for name in names), names
    assert run(["list", *c]) == 0, capsys.readouterr().err
    assert run(["validate", "--deep", *c]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run(["restore", *c]) == 0, capsys.readouterr().err
    assert [
        blob.name for blob in gcs_server.client().list_blobs(TEST_BUCKET, prefix=f"{unique_name}/")
    ] == names
    assert len(consume_all(source_cluster, unique_name, [0, 1])) == 40
    assert restored_equals_source(source_cluster, target_cluster, unique_name)


def test_a_missing_bucket_fails_the_backup_in_one_line_with_the_storage_exit_code(
    gcs_server: GcsServer,
    source_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = config_file(
        tmp_path / "gcs.yaml",
        backup_id="nightly",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": ["none"]}},
        storage=gcs_server.storage_settings("no-such-bucket", "x"),
    )
    capsys.readouterr()
    assert run(["backup", "-c", str(config)]) == StorageError.exit_code
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1, err
    assert "bucket no-such-bucket does not exist" in err[0]
