"""S3 failures that retrying cannot fix fail at once, naming what is missing (issue 18, item 7).

They used to be retried for ``storage.retry_timeout_secs`` (two minutes by default) and then
called retryable: missing or partial credentials, an invalid endpoint URL, rejected credentials;
and ``check`` waited as long for an endpoint that refuses connections.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core import retry
from kbackup.core.errors import ConfigError, StorageError
from kbackup.sandbox.emulators import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from tests.conftest import TEST_BUCKET
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, create_topic, produce

#: Long enough that a retried failure cannot pass for an immediate one.
RETRY_TIMEOUT_SECS = 20
RETRY_HINT = "running the same command again may succeed"


@pytest.fixture
def topic(source_cluster: LocalKafkaCluster, unique_name: str) -> str:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")] * 3)
    return unique_name


def write_config(path: Path, cluster: LocalKafkaCluster, topic: str, storage: dict[str, Any]) -> Path:
    return config_file(
        path,
        backup_id="b",
        source={"bootstrap_servers": [cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage={"retry_timeout_secs": RETRY_TIMEOUT_SECS, **storage},
    )


#: The waits of the storage retry loop during the current test (recorded, and still waited).
RETRY_WAITS: list[float] = []


@pytest.fixture(autouse=True)
def record_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    RETRY_WAITS.clear()

    def sleep(seconds: float) -> None:
        RETRY_WAITS.append(seconds)
        time.sleep(seconds)

    monkeypatch.setattr(retry, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep))


def run_counting_retries(args: list[str]) -> tuple[int, list[float]]:
    """The exit code of ``args``, and the waits the storage retry loop made before its tries."""
    code = run(args)
    return code, list(RETRY_WAITS)


def test_missing_credentials_fail_the_backup_at_once_naming_the_keys(
    s3_server: S3Server, source_cluster: LocalKafkaCluster, topic: str, tmp_path: Path
) -> None:
    """No key in the config, none in the environment or a profile: boto3's NoCredentialsError."""
    storage = {
        "url": f"s3://{TEST_BUCKET}/{topic}",
        "endpoint_url": s3_server.endpoint_url,
        "region": S3_REGION,
    }
    config = write_config(tmp_path / "c.yaml", source_cluster, topic, storage)
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),  # no ~/.aws
        AWS_EC2_METADATA_DISABLED="true",  # no instance role to look for
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        KBACKUP_NO_PROGRESS="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "kbackup", "backup", "-c", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == StorageError.exit_code, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-2] == (
        f"kafka-backup: error: no S3 credentials to write s3://{TEST_BUCKET}/{topic}/"
        ".kafka-backup-write-probe: "
        "storage.access_key_id and storage.secret_access_key are not set, and boto3 found none in the "
        "environment, the AWS profile or an instance role"
    )
    assert lines[-1].startswith(
        "kafka-backup: next step: set storage.access_key_id and storage.secret_access_key"
    )
    assert RETRY_HINT not in done.stderr
    assert "trying again" not in done.stderr  # the retry loop's warning: it failed without retrying


def test_a_secret_key_without_its_access_key_fails_at_once_naming_the_missing_key(
    s3_server: S3Server,
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = {
        "url": f"s3://{TEST_BUCKET}/{topic}",
        "endpoint_url": s3_server.endpoint_url,
        "region": S3_REGION,
        "access_key_id": S3_ACCESS_KEY,
    }
    config = write_config(tmp_path / "c.yaml", source_cluster, topic, storage)
    code, waits = run_counting_retries(["backup", "-c", str(config)])
    err = capsys.readouterr().err
    assert code == StorageError.exit_code, err
    assert err.splitlines()[0] == (
        "kafka-backup: error: partial S3 credentials in the storage section: storage.secret_access_key is "
        f"not set (connect to s3://{TEST_BUCKET}/{topic})"
    )
    assert RETRY_HINT not in err
    assert S3_ACCESS_KEY not in err
    assert waits == []  # failed on its first try, without retrying


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("127.0.0.1:{port}", "expected http(s)://host[:port], got '127.0.0.1:{port}'"),
        ("htp://127.0.0.1:{port}", "expected http(s)://host[:port], got 'htp://127.0.0.1:{port}'"),
    ],
)
def test_an_invalid_endpoint_url_is_a_config_error_before_any_request(
    s3_server: S3Server,
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    endpoint: str,
    expected: str,
) -> None:
    """Without a scheme botocore raised a ValueError (an internal error, exit 1); with a mistyped
    one, an endpoint error that was retried for retry_timeout_secs."""
    storage = {
        **s3_server.storage_settings(TEST_BUCKET, topic),
        "endpoint_url": endpoint.format(port=s3_server.port),
    }
    config = write_config(tmp_path / "c.yaml", source_cluster, topic, storage)
    code, waits = run_counting_retries(["backup", "-c", str(config)])
    err = capsys.readouterr().err
    assert code == ConfigError.exit_code, err
    assert err.splitlines()[0] == (
        f"kafka-backup: error: {config}: storage.endpoint_url: {expected.format(port=s3_server.port)}"
    )
    assert waits == []  # failed on its first try, without retrying


def test_an_endpoint_host_that_does_not_resolve_fails_at_once(
    source_cluster: LocalKafkaCluster, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = "http://kbackup-no-such-host.invalid:9000"
    storage = {
        "url": f"s3://{TEST_BUCKET}/{topic}",
        "endpoint_url": endpoint,
        "region": S3_REGION,
        "access_key_id": S3_ACCESS_KEY,
        "secret_access_key": S3_SECRET_KEY,
        "max_attempts": 1,
    }
    config = write_config(tmp_path / "c.yaml", source_cluster, topic, storage)
    code, waits = run_counting_retries(["backup", "-c", str(config)])
    err = capsys.readouterr().err
    assert code == StorageError.exit_code, err
    assert err.splitlines()[0] == (
        f"kafka-backup: error: the host of storage.endpoint_url {endpoint} does not resolve "
        f"(write s3://{TEST_BUCKET}/{topic}/.kafka-backup-write-probe)"
    )
    assert RETRY_HINT not in err
    assert waits == []  # failed on its first try, without retrying


@pytest.fixture(scope="module")
def authenticating_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto server that checks credentials (it knows no access key, so every key is unknown)."""
    server = S3Server(log_path=tmp_path_factory.mktemp("moto-auth") / "moto.log")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")  # read by the moto process it starts
        server.start()
    yield server
    server.stop()


def test_rejected_credentials_fail_at_once_saying_which_key_to_check(
    authenticating_s3: S3Server,
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(
        tmp_path / "c.yaml", source_cluster, topic, authenticating_s3.storage_settings(TEST_BUCKET, topic)
    )
    code, waits = run_counting_retries(["backup", "-c", str(config)])
    err = capsys.readouterr().err.splitlines()
    assert code == StorageError.exit_code, err
    assert err == [
        "kafka-backup: error: the S3 credentials were rejected (InvalidAccessKeyId) while trying to write "
        f"s3://{TEST_BUCKET}/{topic}/.kafka-backup-write-probe",
        "kafka-backup: next step: the access key is unknown to the store: check storage.access_key_id "
        "(or AWS_ACCESS_KEY_ID, or the AWS profile in use)",
    ]
    assert waits == []  # failed on its first try, without retrying


def test_check_reports_an_endpoint_that_refuses_connections_within_seconds(
    source_cluster: LocalKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run retries a refused connection for retry_timeout_secs (an endpoint may be restarting);
    ``check`` is a preflight and says at once what it found."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    config = config_file(
        tmp_path / "c.yaml",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers]},
        storage={
            "url": f"s3://{TEST_BUCKET}/check",
            "endpoint_url": endpoint,
            "region": S3_REGION,
            "access_key_id": S3_ACCESS_KEY,
            "secret_access_key": S3_SECRET_KEY,
            "retry_timeout_secs": RETRY_TIMEOUT_SECS,
        },
    )
    code, waits = run_counting_retries(["check", "-c", str(config)])
    err = capsys.readouterr().err.splitlines()
    assert code == StorageError.exit_code, err
    assert err[0] == (
        f"kafka-backup: error: list s3://{TEST_BUCKET}/check failed: cannot connect to {endpoint} "
        "(Connection refused); check tries once, with a 5s timeout"
    )
    assert err[1] == (
        "kafka-backup: next step: check storage.endpoint_url and that the object store is reachable"
    )
    assert waits == []  # check tried once
