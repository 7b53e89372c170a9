"""Command-line flags over the config file (kbackup.app.overrides): a flag replaces what it names and
nothing else, and a bad value is a config error naming the flag. No network."""

from __future__ import annotations

import pytest

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import (
    RestoreFlags,
    mapping_inputs,
    restore_inputs,
    storage_settings,
    target_connection,
    three_phase_config,
    with_state_dir,
)
from kbackup.core.errors import ConfigError, UsageError

SECURED_TARGET = {
    "bootstrap_servers": "broker-1:9093",
    "connect_timeout_secs": 7,
    "security": {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "restorer",
        "sasl_password": "s3cret-pass",
        "ssl_ca_location": "/etc/kafka/ca.pem",
    },
    "properties": {"client.rack": "r1"},
}
S3_STORAGE = {
    "url": "s3://bucket/nightly",
    "endpoint_url": "http://127.0.0.1:9000",
    "region": "eu-west-1",
    "access_key_id": "AKIAEXAMPLE",
    "secret_access_key": "very-secret-key",
    "sse": "aws:kms",
    "sse_kms_key_id": "alias/backups",
}


@pytest.fixture
def config() -> KBackupConfig:
    return KBackupConfig.model_validate(
        {
            "backup_id": "nightly",
            "target": SECURED_TARGET,
            "storage": S3_STORAGE,
            "backup": {"source_cluster_id": "prod"},
            "restore": {"topic_mapping": {"a": "a2"}, "exactly_once": False},
        }
    )


def test_path_replaces_only_the_storage_location(config: KBackupConfig) -> None:
    storage = storage_settings(config, "s3://other-bucket/elsewhere")
    assert storage.resolved_url() == "s3://other-bucket/elsewhere"
    for kept in ("endpoint_url", "region", "sse", "sse_kms_key_id"):
        assert getattr(storage, kept) == getattr(config.storage, kept)
    assert storage.secret_access_key is not None
    assert storage.secret_access_key.get_secret_value() == "very-secret-key"
    with pytest.raises(ConfigError, match="--path"):
        storage_settings(config, "ftp://nowhere")


def test_restore_path_keeps_s3_settings_and_flags_go_over_the_section(config: KBackupConfig) -> None:
    inputs = restore_inputs(
        config,
        path="s3://bucket/copy",
        bootstrap_servers="dr-1:9093,dr-2:9093",
        flags=RestoreFlags(topic_mapping={"b": "b2"}, exactly_once=True),
    )
    assert inputs.storage.endpoint_url == "http://127.0.0.1:9000"
    assert inputs.storage.sse == "aws:kms"
    assert inputs.storage.resolved_url() == "s3://bucket/copy"
    assert inputs.settings.topic_mapping == {"a": "a2", "b": "b2"}
    assert inputs.settings.exactly_once is True
    assert inputs.target is not None
    assert inputs.target.bootstrap_servers == ["dr-1:9093", "dr-2:9093"]
    assert config.target is not None
    assert inputs.target.security == config.target.security


def test_bootstrap_servers_keep_the_connections_security(config: KBackupConfig) -> None:
    for connection in (
        target_connection(config, "dr-1:9093"),
        mapping_inputs(config, bootstrap_servers="dr-1:9093").connection,
    ):
        assert connection.bootstrap_servers == ["dr-1:9093"]
        assert connection.security.sasl_mechanism == "SCRAM-SHA-512"
        assert connection.security.sasl_password is not None
        assert connection.security.sasl_password.get_secret_value() == "s3cret-pass"
        assert connection.security.ssl_ca_location == "/etc/kafka/ca.pem"
        assert connection.properties == {"client.rack": "r1"}
        assert connection.connect_timeout_secs == 7
    with pytest.raises(ConfigError, match="--bootstrap-servers"):
        target_connection(config, "no-port")


def test_without_a_section_the_flag_alone_makes_a_plain_connection() -> None:
    connection = target_connection(KBackupConfig(), "k:9092")
    assert connection.security.security_protocol is None
    with pytest.raises(UsageError):
        target_connection(KBackupConfig(), None)


def test_mapping_source_cluster_comes_from_the_flag_else_the_config(config: KBackupConfig) -> None:
    assert mapping_inputs(config).source_cluster == "prod"
    assert mapping_inputs(config, source_cluster="other").source_cluster == "other"
    with pytest.raises(UsageError, match="--source-cluster"):
        mapping_inputs(KBackupConfig.model_validate({"target": SECURED_TARGET}))


def test_state_dir_goes_over_the_three_phase_section(config: KBackupConfig) -> None:
    assert with_state_dir(config, None) is config
    assert with_state_dir(config, "/var/lib/kb").three_phase.state_dir == "/var/lib/kb"
    assert config.three_phase.state_dir != "/var/lib/kb"


def test_three_phase_flags_go_over_the_sections_every_phase_reads(config: KBackupConfig) -> None:
    """One config for the three phases: the target, storage, backup id and topics the restore uses are
    the ones the mapping and the reset read; each flag replaces only what it names."""
    flagged = three_phase_config(
        config,
        bootstrap_servers="dr-1:9093,dr-2:9093",
        path="s3://other-bucket/x",
        backup_id="weekly",
        topics=["orders"],
        state_dir="/var/lib/kb",
    )
    assert flagged.backup_id == "weekly"
    assert flagged.target is not None
    assert config.target is not None
    assert flagged.target.bootstrap_servers == ["dr-1:9093", "dr-2:9093"]
    assert flagged.target.security == config.target.security
    assert flagged.storage.resolved_url() == "s3://other-bucket/x"
    assert flagged.storage.endpoint_url == config.storage.endpoint_url
    assert flagged.restore.topics == ["orders"]
    assert flagged.restore.topic_mapping == {"a": "a2"}
    assert flagged.restore.exactly_once is False
    assert flagged.three_phase.state_dir == "/var/lib/kb"
    assert three_phase_config(config) == config
    with pytest.raises(UsageError, match="--backup-id"):
        three_phase_config(KBackupConfig.model_validate({"target": SECURED_TARGET}))


def test_workers_flag_goes_over_restore_workers_on_restore_and_three_phase(config: KBackupConfig) -> None:
    assert config.restore.workers == "auto"
    assert restore_inputs(config, flags=RestoreFlags(workers=3)).settings.workers == 3
    assert three_phase_config(config, rates=RestoreFlags(workers=2)).restore.workers == 2
    with pytest.raises(ConfigError, match="--workers 0"):
        restore_inputs(config, flags=RestoreFlags(workers=0))
