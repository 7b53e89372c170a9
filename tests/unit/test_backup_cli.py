"""The backup command's flags and config: flags override keys, and mistakes are named before any I/O."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.app import config as config_module
from kbackup.app.overrides import backup_job, storage_settings
from kbackup.cli.main import run
from kbackup.core.errors import UsageError
from tests.support.config_files import config_file

CONFIG: dict[str, object] = {
    "backup_id": "nightly",
    "source": {
        "bootstrap_servers": ["kafka-1:9092"],
        "security": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u",
                     "sasl_password": "${KB_TEST_PASSWORD}"},
        "topics": {"include": ["orders"], "exclude": ["orders-dlq"]},
    },
    "storage": {"url": "s3://bucket/prefix", "endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1"},
    "backup": {"source_cluster_id": "prod", "checkpoint_interval_secs": 5},
}  # fmt: skip


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> config_module.KBackupConfig:
    monkeypatch.setenv("KB_TEST_PASSWORD", "hunter2-secret")
    return config_module.load(config_file(tmp_path / "backup.yaml", **CONFIG))


def test_config_alone_makes_the_job(cfg: config_module.KBackupConfig) -> None:
    job = backup_job(cfg)
    assert job.backup_id == "nightly"
    assert job.source.bootstrap_servers == ["kafka-1:9092"]
    assert job.source.topics.include == ["orders"]
    assert job.source.security.sasl_password is not None
    assert job.source.security.sasl_password.get_secret_value() == "hunter2-secret"
    assert job.settings.source_cluster_id == "prod"
    assert job.settings.continuous is False
    assert job.storage.resolved_url() == "s3://bucket/prefix"


def test_flags_override_config_keys(cfg: config_module.KBackupConfig) -> None:
    job = backup_job(
        cfg,
        bootstrap_servers="k1:1,k2:2",
        include=["payments.*"],
        path="s3://other/place",
        backup_id="weekly",
        source_cluster_id="dr",
        follow=True,
    )
    assert job.backup_id == "weekly"
    assert job.source.bootstrap_servers == ["k1:1", "k2:2"]
    assert job.source.topics.include == ["payments.*"]
    assert job.source.topics.exclude == ["orders-dlq"]  # not given on the command line: kept
    assert job.source.security.security_protocol == "SASL_SSL"
    assert job.settings.source_cluster_id == "dr"
    assert job.settings.continuous is True
    assert job.settings.checkpoint_interval_secs == 5
    # The S3 endpoint and region of the config still apply to the new location.
    assert job.storage.resolved_url() == "s3://other/place"
    assert job.storage.endpoint_url == "http://127.0.0.1:9000"
    assert job.storage.region == "eu-west-1"


def test_flags_alone_are_enough() -> None:
    job = backup_job(config_module.KBackupConfig(), bootstrap_servers="k:9092", backup_id="b")
    assert job.source.topics.include == [".*"]
    assert job.storage.resolved_url() == "./kafka-backups"


def test_path_replaces_backend_keys(tmp_path: Path) -> None:
    cfg = config_module.load(
        config_file(tmp_path / "c.yaml", storage={"backend": "s3", "bucket": "b", "prefix": "p"})
    )
    assert storage_settings(cfg, str(tmp_path / "here")).resolved_url() == str(tmp_path / "here")
    assert storage_settings(cfg, None).resolved_url() == "s3://b/p"


def test_missing_source_or_backup_id_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no source cluster"):
        backup_job(config_module.KBackupConfig(), backup_id="b")
    with pytest.raises(UsageError, match="no backup id"):
        backup_job(config_module.KBackupConfig(), bootstrap_servers="k:9092")


def test_cli_reports_usage_and_config_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["backup", "--backup-id", "b"]) == 2
    assert "no source cluster" in capsys.readouterr().err
    bad = config_file(tmp_path / "bad.yaml", backup={"checkpoint_interval": 5})
    assert run(["backup", "-c", str(bad), "-b", "k:9092", "--backup-id", "b"]) == 3
    assert "backup.checkpoint_interval: unknown key (did you mean 'checkpoint_interval_secs'?)" in (
        capsys.readouterr().err
    )
    assert run(["backup", "-b", "k:9092", "--backup-id", "../escape"]) == 3
    assert "backup id '../escape' is not valid" in capsys.readouterr().err
    assert run(["backup", "-b", "k:9092", "--backup-id", "b", "--include", "("]) == 3
    assert "invalid regular expression" in capsys.readouterr().err


def test_list_of_an_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["list", "--path", str(tmp_path)]) == 0
    assert f"no backups in {tmp_path}" in capsys.readouterr().out
