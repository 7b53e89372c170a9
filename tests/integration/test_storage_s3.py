"""The storage contract on moto's S3 server, reached only through its endpoint URL."""

from __future__ import annotations

import uuid

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.s3server import S3Server
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
