"""The storage contract on moto's S3 server, reached only through its endpoint URL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, produce
from tests.support.storage_contract import StorageContract


class TestS3Storage(StorageContract):
    @pytest.fixture
    def storage(self, s3_server: S3Server) -> Storage:
        prefix = f"contract-{uuid.uuid4().hex[:8]}"
        return open_storage(StorageSettings.model_validate(s3_server.storage_settings(TEST_BUCKET, prefix)))


def test_object_written_through_storage_is_visible_to_plain_s3(s3_server: S3Server) -> None:
    storage = open_storage(StorageSettings.model_validate(s3_server.storage_settings(TEST_BUCKET, "plain")))
    storage.put_bytes("hello/object.txt", b"hello s3")
    body = s3_server.client().get_object(Bucket=TEST_BUCKET, Key="plain/hello/object.txt")["Body"].read()
    assert body == b"hello s3"
    assert storage.get_bytes("hello/object.txt") == b"hello s3"


def test_missing_bucket_is_named(s3_server: S3Server) -> None:
    storage = open_storage(StorageSettings.model_validate(s3_server.storage_settings("no-such-bucket")))
    with pytest.raises(StorageError, match="bucket no-such-bucket does not exist") as caught:
        storage.check_writable()
    assert caught.value.hint == "create the bucket or fix storage.url"


def test_server_side_encryption_is_passed_through(s3_server: S3Server) -> None:
    settings = StorageSettings.model_validate(
        {**s3_server.storage_settings(TEST_BUCKET, "sse"), "sse": "AES256"}
    )
    open_storage(settings).put_bytes("encrypted", b"x")
    head = s3_server.client().head_object(Bucket=TEST_BUCKET, Key="sse/encrypted")
    assert head["ServerSideEncryption"] == "AES256"


@pytest.mark.parametrize(
    ("sse", "key_id"), [("AES256", None), ("aws:kms", "arn:aws:kms:us-east-1:123456789012:key/kbackup-test")]
)
def test_every_object_a_backup_writes_carries_server_side_encryption(
    s3_server: S3Server,
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    sse: str,
    key_id: str | None,
) -> None:
    """Segments (upload_file), manifests (conditional put) and group snapshots all get the SSE settings."""
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(20)])
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 3})
    storage = {**s3_server.storage_settings(TEST_BUCKET, unique_name), "sse": sse}
    if key_id:
        storage["sse_kms_key_id"] = key_id
    config = config_file(
        tmp_path / "sse.yaml",
        backup_id="sse",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [unique_name]},
        },
        storage=storage,
    )
    assert run(["backup", "-c", str(config)]) == 0
    client = s3_server.client()
    keys = [
        item["Key"]
        for item in client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"{unique_name}/")["Contents"]
    ]
    assert any(key.endswith(".parquet") for key in keys)
    assert any("/manifests/" in key for key in keys)
    for key in keys:
        head = client.head_object(Bucket=TEST_BUCKET, Key=key)
        assert head.get("ServerSideEncryption") == sse, key
        if key_id:
            assert head.get("SSEKMSKeyId") == key_id, key


def test_storage_errors_do_not_print_the_kms_key_id(s3_server: S3Server) -> None:
    key_id = "arn:aws:kms:us-east-1:123456789012:key/kbackup-private-key-id"
    settings = StorageSettings.model_validate(
        {**s3_server.storage_settings("no-such-bucket", "x"), "sse": "aws:kms", "sse_kms_key_id": key_id}
    )
    with pytest.raises(StorageError) as caught:
        open_storage(settings).check_writable()
    assert "no-such-bucket" in caught.value.message
    assert key_id not in caught.value.message
    assert key_id not in (caught.value.hint or "")


def test_path_flag_keeps_the_configs_s3_endpoint_credentials_and_encryption(
    s3_server: S3Server,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``-c cfg.yaml --path s3://bucket/prefix`` replaces only the location: the S3 endpoint (moto is
    reachable only through it), the credentials and the server-side encryption stay the config's,
    in backup, describe, validate and restore alike."""
    create_topic(source_cluster, unique_name, partitions=2)
    produce(
        source_cluster,
        unique_name,
        [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(40)],
    )
    restored = f"{unique_name}-restored"
    # The config's own location is another prefix, which holds no backup: only --path finds it.
    storage = {**s3_server.storage_settings(TEST_BUCKET, f"{unique_name}-elsewhere"), "sse": "AES256"}
    config = config_file(
        tmp_path / "s3.yaml",
        backup_id="nightly",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [unique_name]},
        },
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage=storage,
        restore={"topic_mapping": {unique_name: restored}},
    )
    path = f"s3://{TEST_BUCKET}/{unique_name}"
    c = ["-c", str(config), "--path", path]
    assert run(["backup", *c]) == 0, capsys.readouterr().err
    client = s3_server.client()
    keys = [
        item["Key"]
        for item in client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"{unique_name}/")["Contents"]
    ]
    assert any("/manifests/" in key for key in keys)
    for key in keys:
        assert client.head_object(Bucket=TEST_BUCKET, Key=key).get("ServerSideEncryption") == "AES256", key
    assert run(["describe", *c]) == 0, capsys.readouterr().err
    assert run(["validate", "--deep", *c]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run(["restore", *c]) == 0, capsys.readouterr().err
    source = consume_all(source_cluster, unique_name, [0, 1])
    copies = consume_all(target_cluster, restored, [0, 1])
    assert [(r.partition, r.key, r.value) for r in copies] == [(r.partition, r.key, r.value) for r in source]
