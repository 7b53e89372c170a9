"""Azure storage URLs (``az://``, ``abfs://``) and ``storage.azure``, checked offline: no emulator."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.identity import CredentialUnavailableError

from kbackup.cli.main import run
from kbackup.core.config import AzureLocation, StorageSettings, azure_location
from kbackup.core.errors import ConfigError
from kbackup.core.secrets import redact
from kbackup.storage import open_storage
from kbackup.storage.azure import AzureBlobStorage

KEY = "QUNDT1VOVC1LRVktTUFSS0VSLW5ldmVyLXByaW50ZWQ="


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("az://backups", AzureLocation("backups", "")),
        ("az://backups/prod/eu", AzureLocation("backups", "prod/eu")),
        (
            "abfs://backups@acct01.dfs.core.windows.net/prod",
            AzureLocation("backups", "prod", "acct01", "core.windows.net"),
        ),
        (
            "abfss://backups@acct01.dfs.core.chinacloudapi.cn/",
            AzureLocation("backups", "", "acct01", "core.chinacloudapi.cn"),
        ),
    ],
)
def test_azure_urls_are_parsed(url: str, location: AzureLocation) -> None:
    assert azure_location(url) == location


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("az://Backups/x", "'Backups' is not an Azure container name"),
        ("az://ab/x", "'ab' is not an Azure container name"),
        ("az://back--ups/x", "is not an Azure container name"),
        ("az://backups/x?sig=abc", "takes no ?query"),
        ("az://user@backups/x", "expected az://container/prefix"),
        ("abfs://acct01.dfs.core.windows.net/x", "expected abfs://container@account.dfs.core.windows.net"),
        ("abfs://backups@example.com/x", "expected abfs://container@account.dfs.core.windows.net"),
    ],
)
def test_malformed_azure_urls_are_refused(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("?", r"\?")):
        azure_location(url)


def settings(**storage: object) -> StorageSettings:
    return StorageSettings.model_validate(storage)


def test_account_key_section_opens_the_account_endpoint() -> None:
    storage = open_storage(
        settings(url="az://backups/prod", azure={"account_name": "acct01", "account_key": KEY})
    )
    assert isinstance(storage, AzureBlobStorage)
    assert storage.url == "az://backups/prod"
    assert storage.endpoint == "https://acct01.blob.core.windows.net"


def test_abfs_url_names_the_account_and_the_sovereign_cloud() -> None:
    storage = open_storage(
        settings(url="abfss://backups@acct01.dfs.core.chinacloudapi.cn/p", azure={"sas_token": "sv=1&sig=x"})
    )
    assert isinstance(storage, AzureBlobStorage)
    assert storage.endpoint == "https://acct01.blob.core.chinacloudapi.cn"
    assert (storage.container, storage.prefix) == ("backups", "p")


def test_an_abfs_container_is_not_taken_for_a_password() -> None:
    from kbackup.core.config import validate_config

    validate_config({"url": "abfs://backups@acct01.dfs.core.windows.net/p"}, StorageSettings, "t")
    assert redact("backups") == "backups"


def test_plain_http_endpoint_without_a_key_fails_at_once() -> None:
    with pytest.raises(Exception, match="plain-HTTP endpoint") as caught:
        open_storage(
            settings(url="az://backups", azure={"endpoint": "http://127.0.0.1:10000/devstoreaccount1"})
        )
    assert "storage.azure.account_key" in str(getattr(caught.value, "hint", ""))


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_offline(storage: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    Path("c.yaml").write_text(f"source:\n  bootstrap_servers: [k:9092]\nstorage:\n  {storage}")
    code = run(["check", "--offline", "-c", "c.yaml"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "storage",
    [
        f"url: az://backups/prod\n  azure:\n    account_name: acct01\n    account_key: {KEY}\n",
        "url: abfs://backups@acct01.dfs.core.windows.net/prod\n",
        "url: az://backups\n  azure:\n    connection_string: ${AZ_CONN}\n",
        "url: az://backups\n  azure:\n    endpoint: http://127.0.0.1:10000/devstoreaccount1\n"
        "    account_name: devstoreaccount1\n    sas_token: sv=2024&sig=abc\n",
    ],
    ids=["account-key", "abfs", "connection-string", "azurite-sas"],
)
def test_check_offline_accepts_azure_sections(
    storage: str, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZ_CONN", f"AccountName=acct01;AccountKey={KEY}")
    code, err = check_offline(storage, capsys)
    assert code == 0, err
    assert KEY not in err


@pytest.mark.parametrize(
    ("storage", "words"),
    [
        (
            "url: az://backups\n  azure:\n    account_name: acct01\n    acount_key: x\n",
            "storage.azure.acount_key",
        ),
        (
            "url: az://backups\n",
            "an az:// url needs the storage account: set azure.account_name",
        ),
        (
            "url: az://backups\n  region: eu-west-1\n  azure:\n    account_name: acct01\n",
            "region is for an S3 store, and the url is Azure's",
        ),
        (
            "url: s3://bucket/p\n  azure:\n    account_name: acct01\n",
            "azure is for an az:// or abfs:// url, and the store is s3://bucket/p",
        ),
        (
            "url: ./folder\n  azure:\n    account_name: acct01\n",
            "azure is for an az:// or abfs:// url",
        ),
        (
            f"url: az://backups\n  azure:\n    account_name: acct01\n    account_key: {KEY}\n"
            "    sas_token: sv=1&sig=SAS-MARKER\n",
            "account_key and sas_token are each a credential: keep one",
        ),
        (
            "url: abfs://backups@acct01.dfs.core.windows.net\n  azure:\n    account_name: acct02\n",
            "the url names the account acct01 and azure.account_name is acct02",
        ),
        (
            f"url: az://backups\n  azure:\n    endpoint: http://127.0.0.1:1/x\n    account_key: {KEY}\n",
            "azure.account_key needs the account it belongs to",
        ),
        ("url: az://Backups\n", "is not an Azure container name"),
        ("url: ftp://bucket\n", "az:// or abfs:// URL, got scheme 'ftp'"),
    ],
    ids=[
        "typo",
        "no-account",
        "s3-key-on-azure",
        "azure-on-s3",
        "azure-on-folder",
        "two-credentials",
        "two-accounts",
        "key-without-account",
        "container-name",
        "unknown-scheme",
    ],
)
def test_check_offline_refuses_bad_azure_sections_in_one_line(
    storage: str, words: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check_offline(storage, capsys)
    assert code == ConfigError.exit_code, err
    assert len(err.splitlines()) == 1, err
    assert words in err
    assert KEY not in err
    assert "SAS-MARKER" not in err


def test_path_flag_to_a_folder_drops_the_files_azure_section(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-c azure.yaml --path ./copy``: the account and credentials are the file's container's."""
    Path("c.yaml").write_text(
        "source:\n  bootstrap_servers: [k:9092]\nstorage:\n  url: az://backups\n  azure:\n"
        f"    account_name: acct01\n    account_key: {KEY}\n"
    )
    (folder / "copy").mkdir()
    assert run(["list", "-c", "c.yaml", "--path", "./copy"]) == 0, capsys.readouterr().err


def service_error(kind: type[HttpResponseError], status: int, code: str) -> HttpResponseError:
    error = kind(message=f"{code} (status {status})")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]  # set by the storage SDK on its errors
    return error


@pytest.mark.parametrize(
    ("failure", "retryable", "words"),
    [
        (
            service_error(HttpResponseError, 503, "ServerBusy"),
            True,
            "write az://backups/p/k failed: ServerBusy",
        ),
        (service_error(HttpResponseError, 429, "TooManyRequests"), True, "TooManyRequests (HTTP 429)"),
        (service_error(HttpResponseError, 500, "InternalError"), True, "InternalError (HTTP 500)"),
        (
            service_error(ResourceNotFoundError, 404, "ContainerNotFound"),
            False,
            "container backups does not exist",
        ),
        (
            service_error(ClientAuthenticationError, 403, "AuthenticationFailed"),
            False,
            "the Azure credentials were rejected (AuthenticationFailed)",
        ),
        (service_error(HttpResponseError, 403, "AuthorizationPermissionMismatch"), False, "denied"),
        (ServiceRequestError("connection refused"), True, "cannot connect to https://acct01.blob"),
        (IncompleteReadError(message="cut"), True, "was cut short"),
        (CredentialUnavailableError("no identity"), False, "no Azure credentials to write"),
    ],
    ids=[
        "busy",
        "throttled",
        "500",
        "no-container",
        "bad-key",
        "no-role",
        "refused",
        "cut-short",
        "no-identity",
    ],
)
def test_failures_are_classified_retryable_or_terminal(
    failure: AzureError, retryable: bool, words: str
) -> None:
    storage = open_storage(
        settings(url="az://backups/p", azure={"account_name": "acct01", "account_key": KEY})
    )
    assert isinstance(storage, AzureBlobStorage)
    error = storage._error(failure, "write", "k")
    assert error.retryable is retryable
    assert words in error.message
    assert "\n" not in error.message
