"""``gs://bucket/prefix`` URLs and the ``storage.gcs`` section, checked when the file is read (no
emulator, no request): ``check --offline`` accepts a good section and refuses a bad key in one line
naming it, S3 keys on a gs:// URL and ``storage.gcs`` elsewhere are refused where they would be
ignored, and a missing credentials file fails at once, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.app.overrides import _storage_at
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings, validate_config
from kbackup.core.errors import ConfigError, StorageError
from kbackup.storage import open_storage


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    return tmp_path


def check_offline(config: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    Path("c.yaml").write_text(config)
    code = run(["check", "--offline", "-c", "c.yaml"])
    return code, capsys.readouterr().err.splitlines()


def test_a_good_gcs_section_passes_the_offline_check(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check_offline(
        "storage:\n  url: gs://kbackup-backups/prod\n  gcs:\n    project: my-project\n"
        "    endpoint_url: http://127.0.0.1:4443\n    credentials_file: /etc/kbackup/sa.json\n",
        capsys,
    )
    assert code == 0, err


@pytest.mark.parametrize(
    ("storage", "line"),
    [
        (
            "url: gs://kbackup-backups/prod\n  gcs:\n    credential_file: sa.json\n",
            "storage.gcs.credential_file: unknown key (did you mean 'credentials_file'?)",
        ),
        (
            "url: gs://kbackup-backups/prod\n  gcs:\n    endpoint_url: 127.0.0.1:4443\n",
            "expected http(s)://host[:port]",
        ),
        (
            "url: gs://kbackup-backups/prod\n  gcs:\n    anonymous: true\n    credentials_file: sa.json\n",
            "anonymous sends no credentials and credentials_file names some: keep one",
        ),
        (
            "url: gs://kbackup-backups/prod\n  region: us-east-1\n  sse: AES256\n",
            "sse and region are for an S3 store, and url gs://kbackup-backups/prod is Google Cloud "
            "Storage: remove them (its keys go under storage.gcs)",
        ),
        (
            "url: s3://kbackup-backups/prod\n  gcs:\n    project: p\n",
            "gcs is for a gs://bucket/prefix url, and url s3://kbackup-backups/prod is not one",
        ),
        (
            "url: ./backups\n  gcs:\n    project: p\n",
            "gcs is for a gs://bucket/prefix url, and url ./backups",
        ),
        ("url: gs://Backups/prod\n", "'Backups' is not a Cloud Storage bucket name"),
        ("url: gs://\n", "expected gs://bucket[/prefix]"),
        ("url: gs://kbackup-backups/prod?project=p\n", "a gs:// URL takes no ?query"),
        (
            "url: gcs://kbackup-backups/prod\n",
            "expected a folder path, file://, s3://, gs://, az:// or abfs:// URL",
        ),
    ],
)
def test_a_bad_gcs_setting_is_one_line_naming_it(
    folder: Path, capsys: pytest.CaptureFixture[str], storage: str, line: str
) -> None:
    code, err = check_offline(f"storage:\n  {storage}", capsys)
    assert code == ConfigError.exit_code
    assert len(err) == 1, err
    assert line in err[0]


def test_an_unsafe_prefix_is_refused_before_any_request(folder: Path) -> None:
    with pytest.raises(ConfigError, match="is not a safe relative path") as caught:
        open_storage("gs://kbackup-backups/a/../b")
    assert caught.value.hint == "name a plain prefix such as gs://bucket/backups/prod"


def test_the_url_names_the_bucket_and_prefix(folder: Path, tmp_path: Path) -> None:
    storage = open_storage(
        StorageSettings.model_validate(
            {"url": "gs://kbackup-backups/prod/daily/", "gcs": {"anonymous": True}}
        )
    )
    assert storage.url == "gs://kbackup-backups/prod/daily"
    assert (storage.bucket_name, storage.prefix) == ("kbackup-backups", "prod/daily")  # type: ignore[attr-defined]


def test_storage_emulator_host_is_the_endpoint_with_no_credentials(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the Google client itself does: no credentials file, no Application Default Credentials."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    storage = open_storage("gs://kbackup-backups/prod")
    assert storage.endpoint == "http://127.0.0.1:4443"  # type: ignore[attr-defined]


def test_a_missing_credentials_file_fails_at_once_naming_it(folder: Path) -> None:
    settings = validate_config(
        {"url": "gs://kbackup-backups/prod", "gcs": {"credentials_file": "missing-sa.json"}},
        StorageSettings,
        "f",
    )
    with pytest.raises(StorageError, match=r"storage.gcs.credentials_file missing-sa.json does not exist"):
        open_storage(settings)


def test_no_credentials_at_all_fail_at_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credentials variable naming a missing file: Application Default Credentials fail when the
    storage opens, not after a run's retries."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(folder / "gone.json"))
    with pytest.raises(StorageError, match="no Google Cloud credentials") as caught:
        open_storage("gs://kbackup-backups/prod")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in caught.value.message
    assert not caught.value.retryable


def test_path_flag_keeps_gcs_settings_only_for_a_gs_url() -> None:
    storage = StorageSettings.model_validate(
        {
            "url": "gs://kbackup-backups/prod",
            "gcs": {"endpoint_url": "http://127.0.0.1:4443", "anonymous": True},
        }
    )
    moved = _storage_at(storage, "gs://kbackup-backups/copy")
    assert moved.gcs == storage.gcs
    assert _storage_at(storage, "./copy").gcs is None


def test_a_missing_credentials_file_is_named_by_the_command(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI, where every secret the config holds is masked: the file's path is no secret."""
    Path("c.yaml").write_text(
        "storage:\n  url: gs://kbackup-backups/prod\n  gcs:\n    credentials_file: /nope/sa-key.json\n"
    )
    code = run(["list", "-c", "c.yaml"])
    err = capsys.readouterr().err.splitlines()
    assert code == StorageError.exit_code
    assert err[0] == "kafka-backup: error: storage.gcs.credentials_file /nope/sa-key.json does not exist"


def test_a_key_pasted_in_place_of_its_file_is_refused_and_never_echoed(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pasted = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n"}'
    code, err = check_offline(
        f"storage:\n  url: gs://kbackup-backups/prod\n  gcs:\n    credentials_file: '{pasted}'\n", capsys
    )
    assert code == ConfigError.exit_code
    assert "storage.gcs.credentials_file: holds what looks like the JSON key itself" in err[0], err
    assert "BEGIN PRIVATE KEY" not in "\n".join(err)
    assert "MIIEvQ" not in "\n".join(err)
