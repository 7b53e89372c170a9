"""The storage contract on Azurite's blob service, reached only through its endpoint."""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceExistsError

from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.core.secrets import redact
from kbackup.sandbox.emulators import AZURITE_ACCOUNT, AZURITE_ACCOUNT_KEY, Azurite
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.storage import Storage, open_storage
from kbackup.storage import azure as azure_module
from kbackup.storage.azure import AzureBlobStorage
from tests.conftest import TEST_BUCKET
from tests.support.cloud_round_trip import restored_equals_source, seeded_round_trip
from tests.support.config_files import config_file
from tests.support.storage_contract import StorageContract


def azure_storage(
    azurite: Azurite, container: str = TEST_BUCKET, prefix: str = "", **changes: object
) -> Storage:
    settings = azurite.storage_settings(container, prefix)
    settings["azure"].update(changes)
    return open_storage(StorageSettings.model_validate(settings))


class TestAzureBlobStorage(StorageContract):
    @pytest.fixture
    def storage(self, azurite: Azurite) -> Storage:
        return azure_storage(azurite, prefix=f"contract-{uuid.uuid4().hex[:8]}")


def test_the_emulator_itself_refuses_a_second_create_if_absent(azurite: Azurite) -> None:
    """Azurite, not our code, refuses: the contract's create-if-absent test proves the store's rule."""
    blob = azurite.service().get_blob_client(TEST_BUCKET, f"direct-{uuid.uuid4().hex}")
    blob.upload_blob(b"first", overwrite=False)
    with pytest.raises(ResourceExistsError):
        blob.upload_blob(b"second", overwrite=False)
    assert blob.download_blob().readall() == b"first"


def test_object_written_through_storage_is_visible_to_plain_azure(azurite: Azurite) -> None:
    storage = azure_storage(azurite, prefix="plain")
    storage.put_bytes("hello/object.txt", b"hello azure")
    blob = azurite.service().get_blob_client(TEST_BUCKET, "plain/hello/object.txt")
    assert blob.download_blob().readall() == b"hello azure"


def test_connection_string_reaches_the_same_blobs(azurite: Azurite) -> None:
    settings = {
        "url": f"az://{TEST_BUCKET}/by-string",
        "azure": {"connection_string": azurite.connection_string},
    }
    storage = open_storage(StorageSettings.model_validate(settings))
    storage.put_bytes("k", b"v")
    assert azure_storage(azurite, prefix="by-string").get_bytes("k") == b"v"


def test_listing_and_deleting_cross_page_and_batch_boundaries(azurite: Azurite) -> None:
    storage = azure_storage(azurite, prefix=f"paging-{uuid.uuid4().hex[:8]}")
    assert isinstance(storage, AzureBlobStorage)
    storage.list_page_size = 7
    keys = [f"p/{index:04d}" for index in range(40)]
    for key in keys:
        storage.put_bytes(key, key.encode())
    assert [info.key for info in storage.list("p/")] == keys
    assert storage.delete_many([*keys[:30], "p/never-there"]) == 1
    assert [info.key for info in storage.list("p/")] == keys[30:]


def test_missing_container_is_named_in_one_line(azurite: Azurite) -> None:
    storage = azure_storage(azurite, container="no-such-container")
    with pytest.raises(StorageError) as caught:
        storage.check_writable()
    assert caught.value.message == (
        "container no-such-container does not exist (write az://no-such-container/.kafka-backup-write-probe)"
    )
    assert caught.value.hint == "create the container or fix storage.url"
    assert caught.value.exit_code == StorageError.exit_code
    assert not caught.value.retryable


def test_a_wrong_account_key_is_rejected_without_printing_it(
    azurite: Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    wrong_key = base64.b64encode(b"WRONG-KEY-MARKER-" + bytes(47)).decode()
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        azure_storage(azurite, account_key=wrong_key).put_bytes("k", b"v")
    assert time.monotonic() - started < 5, "a rejected key is not retried"
    # Azure answers AuthenticationFailed; Azurite AuthorizationFailure (both 403).
    assert caught.value.message == (
        f"access to az://{TEST_BUCKET}/k denied (AuthorizationFailure) while trying to write"
    )
    assert "storage.azure's account_key" in (caught.value.hint or "")
    assert not caught.value.retryable
    for text in (caught.value.message, caught.value.hint or "", caplog.text):
        assert wrong_key not in text


def test_a_wrong_sas_token_is_refused_and_never_printed(
    azurite: Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    signature = "SAS-SIGNATURE-MARKER"
    sas = f"sv=2024-08-04&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&spr=http&sig={signature}"
    caplog.set_level(logging.DEBUG)
    settings = {
        "url": f"az://{TEST_BUCKET}/sas",
        "azure": {"account_name": AZURITE_ACCOUNT, "endpoint": azurite.endpoint, "sas_token": sas},
    }
    storage = open_storage(StorageSettings.model_validate(settings))
    with pytest.raises(StorageError) as caught:
        storage.put_bytes("k", b"v")
    assert caught.value.exit_code == StorageError.exit_code
    assert not caught.value.retryable
    ours = "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith(("kbackup", "azure"))
    )
    for text in (str(caught.value), caught.value.message, caught.value.hint or "", ours):
        assert signature not in text
    # Lines of other libraries (urllib3's request lines at debug) pass the redactor before print.
    assert signature not in redact(caplog.text)


def test_an_unreachable_endpoint_is_retried_then_named(caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}/{AZURITE_ACCOUNT}"
    settings = {
        "url": f"az://{TEST_BUCKET}",
        "azure": {"account_name": AZURITE_ACCOUNT, "endpoint": endpoint, "account_key": AZURITE_ACCOUNT_KEY},
        "max_attempts": 3,
        "retry_timeout_secs": 1,
    }
    storage = open_storage(StorageSettings.model_validate(settings))
    with pytest.raises(StorageError) as caught:
        storage.get_bytes("k")
    message = caught.value.message
    assert message.startswith(f"read az://{TEST_BUCKET}/k failed: cannot connect to {endpoint} (")
    assert "still failing after" in message
    assert "storage.retry_timeout_secs is 1" in message
    assert caught.value.retryable
    assert caplog.text.count("trying again") >= 2
    assert AZURITE_ACCOUNT_KEY not in caplog.text + message


def test_no_credentials_at_all_fail_at_once_naming_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, SAS or connection string, and no identity for DefaultAzureCredential: the first
    request fails without retries, saying which keys to set."""
    for name in ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no Azure CLI, PowerShell or azd to ask
    settings = {
        "url": f"az://{TEST_BUCKET}",
        "azure": {"endpoint": f"https://127.0.0.1:{free_port()}/{AZURITE_ACCOUNT}"},
    }
    storage = open_storage(StorageSettings.model_validate(settings))
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        storage.put_bytes("k", b"v")
    assert time.monotonic() - started < 30
    assert caught.value.message.startswith(f"no Azure credentials to write az://{TEST_BUCKET}/k")
    assert "storage.azure.account_key" in (caught.value.hint or "")
    assert not caught.value.retryable


def test_backup_validate_and_restore_through_azure_from_the_cli(
    azurite: Azurite,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kafka-backup backup``, ``validate --deep`` and ``restore`` with an az:// storage url: every
    record comes back in order, and the blobs are where the url says, manifests included."""
    config = seeded_round_trip(
        source_cluster,
        target_cluster,
        unique_name,
        azurite.storage_settings(TEST_BUCKET, unique_name),
        tmp_path / "azure.yaml",
        records=60,
        group_offset=7,
    )
    c = ["-c", str(config)]
    assert run(["backup", *c]) == 0, capsys.readouterr().err
    names = [
        blob.name for blob in azurite.service().get_container_client(TEST_BUCKET).list_blobs(unique_name)
    ]
    assert any(name.endswith(".parquet") for name in names)
    assert any("/manifests/" in name for name in names)
    assert run(["validate", "--deep", *c]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run(["restore", *c]) == 0, capsys.readouterr().err
    assert restored_equals_source(source_cluster, target_cluster, unique_name)
    assert AZURITE_ACCOUNT_KEY not in capsys.readouterr().err


def test_a_file_above_the_single_put_size_goes_in_blocks_committed_whole(
    azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(azure_module, "SINGLE_PUT_SIZE", 64 * 1024)
    monkeypatch.setattr(azure_module, "BLOCK_SIZE", 64 * 1024)
    storage = azure_storage(azurite, prefix=f"blocks-{uuid.uuid4().hex[:8]}")
    assert isinstance(storage, AzureBlobStorage)
    source = tmp_path / "segment.parquet"
    source.write_bytes(os.urandom(300_000))
    storage.put_file("data/t/0/seg.parquet", source)
    blob = azurite.service().get_blob_client(TEST_BUCKET, f"{storage.prefix}/data/t/0/seg.parquet")
    committed, uncommitted = blob.get_block_list("all")
    assert len(committed) == 5
    assert uncommitted == []
    assert storage.get_bytes("data/t/0/seg.parquet") == source.read_bytes()


def test_cli_check_writes_nothing_and_a_missing_container_is_exit_7(
    azurite: Azurite, source_cluster: LocalKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"check-{uuid.uuid4().hex[:8]}"
    good = config_file(
        tmp_path / "good.yaml",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers]},
        storage=azurite.storage_settings(TEST_BUCKET, prefix),
    )
    assert run(["check", "-c", str(good)]) == 0, capsys.readouterr()
    container = azurite.service().get_container_client(TEST_BUCKET)
    assert list(container.list_blobs(name_starts_with=prefix)) == []
    missing = config_file(tmp_path / "missing.yaml", storage=azurite.storage_settings("no-such-container"))
    capsys.readouterr()
    assert run(["list", "-c", str(missing)]) == StorageError.exit_code == 7
    err = capsys.readouterr().err
    assert "container no-such-container does not exist" in err.splitlines()[0]
    assert AZURITE_ACCOUNT_KEY not in err
