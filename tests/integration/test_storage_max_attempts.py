"""``storage.max_attempts`` is the number of attempts botocore makes for one S3 request
(docs/configuration.md: "Attempts per S3 request"), not one more: counted as the requests a proxy in
front of moto's server received for one operation that keeps failing, with
``storage.retry_timeout_secs: 0`` so that the run's own retry loop adds none. ``check``'s storage
tries each request once whatever ``max_attempts`` says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.emulators import S3Server
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.faulty_proxy import FaultyProxy, Mode


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(upstream_port=s3_server.port)
    yield proxy
    proxy.close()


def settings(s3_server: S3Server, proxy: FaultyProxy, max_attempts: int) -> StorageSettings:
    return StorageSettings.model_validate(
        {
            **s3_server.storage_settings(TEST_BUCKET, "max-attempts"),
            "endpoint_url": proxy.endpoint_url,
            "max_attempts": max_attempts,
            "retry_timeout_secs": 0,  # the run's own loop gives up on the first failure
        }
    )


@pytest.mark.parametrize(
    ("mode", "max_attempts"),
    [
        ("busy", 1),  # 503 SlowDown: S3 throttling, retried by botocore
        ("busy", 3),
        ("reset", 2),  # connection reset: retried by botocore
    ],
)
def test_an_s3_request_is_tried_max_attempts_times(
    s3_server: S3Server, proxy: FaultyProxy, mode: Mode, max_attempts: int
) -> None:
    storage = open_storage(settings(s3_server, proxy, max_attempts))
    proxy.set_mode(mode)
    with pytest.raises(StorageError):
        storage.get_bytes("b1/manifests/00000000.json")
    # Every attempt is a new connection (the 503 says "Connection: close"; a reset ends it).
    assert proxy.faults_served == max_attempts


def test_check_tries_each_request_once(s3_server: S3Server, proxy: FaultyProxy) -> None:
    storage = open_storage(settings(s3_server, proxy, max_attempts=3), check_timeout_secs=5)
    proxy.set_mode("busy")
    with pytest.raises(StorageError):
        storage.get_bytes("b1/manifests/00000000.json")
    assert proxy.faults_served == 1
