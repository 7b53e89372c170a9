"""Storage class / access tier and server-side encryption keys, checked when the file is read (no
store, no request): ``check --offline`` accepts the classes whose objects are read at once and each
cloud's encryption setting, and refuses in one line, naming the key, the value and why, a class whose
objects need a restore before a read, a class in another spelling, a malformed key name, and a key
of one cloud beside another cloud's URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.app.overrides import _storage_at
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import ConfigError

CMEK_KEY = "projects/p/locations/europe-west1/keyRings/backups/cryptoKeys/segments"
AZURE = "url: az://backups/prod\n  azure:\n    account_name: prodbackups\n"
GCS = "url: gs://kbackup-backups/prod\n  gcs:\n    anonymous: true\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_offline(storage: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    Path("c.yaml").write_text(f"storage:\n  {storage}")
    code = run(["check", "--offline", "-c", "c.yaml"])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    "storage",
    [
        *(
            f"url: s3://bucket/prod\n  storage_class: {name}\n  sse: aws:kms\n  sse_kms_key_id: alias/k\n"
            for name in ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR")
        ),
        *(f"{GCS}    storage_class: {name}\n" for name in ("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE")),
        f"{GCS}    kms_key_name: {CMEK_KEY}\n",
        *(f"{AZURE}    access_tier: {name}\n" for name in ("Hot", "Cool", "Cold")),
        f"{AZURE}    encryption_scope: backups-cmk-1\n",
    ],
)
def test_readable_classes_and_encryption_settings_pass(
    folder: Path, capsys: pytest.CaptureFixture[str], storage: str
) -> None:
    code, err = check_offline(storage, capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    ("storage", "line"),
    [
        (
            "url: s3://bucket/prod\n  storage_class: GLACIER\n",
            "storage.storage_class: GLACIER is refused: its objects cannot be read until each is restored "
            "(hours), so a restore would fail; use GLACIER_IR (read at once), or move older segments there "
            "with a lifecycle rule instead",
        ),
        ("url: s3://bucket/prod\n  storage_class: DEEP_ARCHIVE\n", "DEEP_ARCHIVE is refused"),
        ("url: s3://bucket/prod\n  storage_class: deep_archive\n", "deep_archive is refused"),
        (
            "url: s3://bucket/prod\n  storage_class: standard_ia\n",
            "storage.storage_class: 'standard_ia' is written STANDARD_IA (S3's spelling)",
        ),
        ("url: s3://bucket/prod\n  storage_class: SNOW\n", "must be STANDARD, STANDARD_IA"),
        (
            f"{AZURE}    access_tier: Archive\n",
            "storage.azure.access_tier: Archive is refused: an archived blob cannot be read until it is "
            "rehydrated (hours)",
        ),
        (f"{AZURE}    access_tier: cool\n", "'cool' is written Cool (Azure's spelling)"),
        (f"{GCS}    storage_class: Nearline\n", "'Nearline' is written NEARLINE (Cloud Storage's spelling)"),
        (f"{GCS}    storage_class: GLACIER\n", "storage.gcs.storage_class: must be STANDARD, NEARLINE"),
        (
            f"{GCS}    kms_key_name: {CMEK_KEY}/cryptoKeyVersions/1\n",
            "storage.gcs.kms_key_name: '" + CMEK_KEY + "/cryptoKeyVersions/1' is not a Cloud KMS key name: "
            "expected projects/P/locations/L/keyRings/R/cryptoKeys/K (no cryptoKeyVersions)",
        ),
        (f"{GCS}    kms_key_name: segments\n", "'segments' is not a Cloud KMS key name"),
        (f"{AZURE}    encryption_scope: cmk--1\n", "'cmk--1' is not an encryption scope name"),
        (f"{AZURE}    encryption_scope: k\n", "'k' is not an encryption scope name"),
        # A key of one store beside another store's URL: refused as the S3 keys and sections are.
        (
            f"{GCS}  storage_class: NEARLINE\n",
            "storage.storage_class: is S3's storage class, and the url is Google Cloud Storage's: write "
            "storage.gcs.storage_class (got 'NEARLINE')",
        ),
        (
            "url: abfs://backups@prodbackups.dfs.core.windows.net/prod\n  storage_class: Cool\n",
            "storage.storage_class: is S3's storage class, and the url is Azure's: write "
            "storage.azure.access_tier",
        ),
        (
            f"{AZURE}  storage_class: STANDARD_IA\n",
            "the url is Azure's: write storage.azure.access_tier (got 'STANDARD_IA')",
        ),
        (
            "url: ./backups\n  storage_class: STANDARD_IA\n",
            "storage_class is for an S3 store, and url ./backups",
        ),
        (
            "url: s3://bucket/prod\n  gcs:\n    storage_class: NEARLINE\n",
            "gcs is for a gs://bucket/prefix url, and url s3://bucket/prod is not one",
        ),
        (
            "url: gs://kbackup-backups/prod\n  azure:\n    access_tier: Cool\n",
            "azure is for an az:// or abfs:// url, and the store is gs://kbackup-backups/prod",
        ),
    ],
)
def test_a_refused_class_or_encryption_setting_is_one_line_naming_it(
    folder: Path, capsys: pytest.CaptureFixture[str], storage: str, line: str
) -> None:
    code, err = check_offline(storage, capsys)
    assert code == ConfigError.exit_code
    assert len(err) == 1, err
    assert line in err[0]


def test_a_path_flag_to_another_store_drops_the_s3_storage_class() -> None:
    """As the other S3 keys: ``list -c prod.yaml -p ./copy`` reads a folder, which has no class."""
    storage = StorageSettings.model_validate(
        {"url": "s3://bucket/prod", "storage_class": "STANDARD_IA", "sse": "aws:kms"}
    )
    assert _storage_at(storage, "./copy").storage_class is None
    assert _storage_at(storage, "s3://other/copy").storage_class == "STANDARD_IA"
