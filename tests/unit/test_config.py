from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbackup.app import config as config_module
from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import ConfigError
from kbackup.core.secrets import redact


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "backup.yaml"
    path.write_text(text)
    return path


def test_full_seed_shaped_config_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
mode: backup
backup_id: nightly-1
source:
  bootstrap_servers: ["127.0.0.1:9092", "127.0.0.1:9093"]
  security:
    security_protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: backup
    sasl_password: hunter2-secret
  properties:
    client.rack: eu-1a
    fetch.max.bytes: 10485760
  topics:
    include: ["orders", "payments\\\\..*"]
    exclude: ["__.*"]
storage:
  backend: s3
  bucket: kafka-backups
  prefix: prod/
  region: eu-west-1
backup:
  include_offset_headers: true
  source_cluster_id: prod-us-east-1
  compression: zstd
""",
    )
    cfg = config_module.load(path)
    assert cfg.source is not None
    assert cfg.source.bootstrap_servers == ["127.0.0.1:9092", "127.0.0.1:9093"]
    assert cfg.backup.source_cluster_id == "prod-us-east-1"
    assert cfg.storage.resolved_url() == "s3://kafka-backups/prod"
    props = cfg.source.librdkafka_properties()
    assert props["sasl.password"] == "hunter2-secret"
    assert props["security.protocol"] == "SASL_SSL"
    assert props["fetch.max.bytes"] == "10485760"
    # The password never shows in the model's repr, and is redacted wherever it leaks into text.
    assert "hunter2-secret" not in repr(cfg)
    assert redact("password is hunter2-secret") == "password is ***"


def test_unknown_key_names_file_key_and_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "backup:\n  include_offset_header: true\n")
    with pytest.raises(ConfigError) as caught:
        config_module.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: backup.include_offset_header: unknown key")
    assert "did you mean 'include_offset_headers'" in message
    assert "\n" not in message


def test_wrong_type_names_key_and_expectation(tmp_path: Path) -> None:
    path = write(tmp_path, "backup:\n  segment_max_bytes: lots\n")
    with pytest.raises(ConfigError) as caught:
        config_module.load(path)
    message = str(caught.value)
    assert f"{path}: backup.segment_max_bytes:" in message
    assert "must be a whole number (got 'lots')" in message
    assert "'lots'" in message


def test_secret_values_never_echoed_in_type_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path, "source:\n  bootstrap_servers: a:1\n  security:\n    sasl_password: [leaky-value]\n"
    )
    with pytest.raises(ConfigError) as caught:
        config_module.load(path)
    message = str(caught.value)
    assert "source.security.sasl_password" in message
    assert "leaky-value" not in message


def test_env_substitution_and_missing_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_PASSWORD", "from-the-environment")
    path = write(
        tmp_path,
        "source:\n  bootstrap_servers: ${KB_TEST_BOOTSTRAP:-127.0.0.1:9092}\n"
        "  security:\n    sasl_password: ${KB_TEST_PASSWORD}\n",
    )
    cfg = config_module.load(path)
    assert cfg.source is not None
    assert cfg.source.bootstrap_servers == ["127.0.0.1:9092"]
    assert cfg.source.librdkafka_properties()["sasl.password"] == "from-the-environment"
    assert redact("x from-the-environment y") == "x *** y"

    monkeypatch.delenv("KB_TEST_PASSWORD")
    with pytest.raises(ConfigError) as caught:
        config_module.load(path)
    assert "source.security.sasl_password: environment variable KB_TEST_PASSWORD is not set" in str(
        caught.value
    )


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "source: [unclosed\n")
    with pytest.raises(ConfigError, match="could not parse YAML"):
        config_module.load(path)
    with pytest.raises(ConfigError, match="not found"):
        config_module.load(tmp_path / "nope.yaml")


def test_bad_regex_and_empty_topic_list(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  bootstrap_servers: a:1\n  topics:\n    include: ['orders(']\n")
    with pytest.raises(ConfigError, match="invalid regular expression"):
        config_module.load(path)
    path = write(tmp_path, "source:\n  bootstrap_servers: a:1\n  topics:\n    include: []\n")
    with pytest.raises(ConfigError, match=r"source\.topics\.include"):
        config_module.load(path)


def test_bootstrap_servers_must_be_host_port() -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        KafkaConnection.model_validate({"bootstrap_servers": "localhost"})


def test_secret_like_properties_are_held_as_secrets() -> None:
    connection = KafkaConnection.model_validate(
        {"bootstrap_servers": "a:1", "properties": {"sasl.oauthbearer.client.secret": "s3cr3t-value"}}
    )
    assert "s3cr3t-value" not in repr(connection)
    assert connection.librdkafka_properties()["sasl.oauthbearer.client.secret"] == "s3cr3t-value"


@pytest.mark.parametrize(
    ("settings", "url"),
    [
        ({}, "./kafka-backups"),
        ({"url": "s3://b/p"}, "s3://b/p"),
        ({"backend": "filesystem", "path": "/data/backups"}, "/data/backups"),
        ({"bucket": "b"}, "s3://b"),
    ],
)
def test_storage_url_resolution(settings: dict[str, str], url: str) -> None:
    assert StorageSettings.model_validate(settings).resolved_url() == url


def test_storage_url_rejects_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="scheme 'ftp'"):
        StorageSettings.model_validate({"url": "ftp://bucket"})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3//bucket/prod", "looks like s3://bucket/prod with the colon missing"),
        ("file///data/backups", "looks like file:///data/backups with the colon missing"),
        ("s3:/bucket", "expected s3://bucket[/prefix]"),
        ("file://backups/x", "names the host 'backups' and the folder /x"),
        ("file:backups", "a file: URL holds an absolute path"),
    ],
)
def test_storage_url_typos_are_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        StorageSettings.model_validate({"url": url})


@pytest.mark.parametrize(
    "url", ["./s3//bucket", "backups/prod", "file:///data/x", "file://localhost/x", "C:\\b"]
)
def test_storage_urls_that_are_folders_pass(url: str) -> None:
    assert StorageSettings.model_validate({"url": url}).resolved_url() == url


@pytest.mark.parametrize("endpoint", ["minio:9000", "htp://minio:9000", "http://:9000", "http://minio:port"])
def test_s3_endpoint_must_be_an_http_url(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint_url"):
        StorageSettings.model_validate({"endpoint_url": endpoint})


def test_relative_paths_in_a_config_file_are_relative_to_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "etc"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)  # not the file's folder
    path = folder / "dr.yaml"
    path.write_text(
        "source:\n"
        "  bootstrap_servers: k:1\n"
        "  security: {ssl_ca_location: tls/ca.pem, ssl_certificate_location: /abs/cert.pem}\n"
        "  properties: {ssl.crl.location: tls/crl.pem, client.id: backup}\n"
        "target:\n"
        "  bootstrap_servers: k:2\n"
        "  security: {ssl_ca_location: probe}\n"
        "storage: {url: ./kafka-backups}\n"
        "backup: {scratch_dir: ../scratch}\n"
        "mapping:\n"
        "  spark_jars: [jars/kafka.jar, 'hdfs://nn/jars/x.jar']\n"
        "  kafka_options:\n"
        "    {kafka.ssl.truststore.location: ts.jks, ssl.endpoint.identification.algorithm: ''}\n"
        "offset_reset: {mapping_file: mapping.json}\n"
        "drill: {report_path: reports/drill.json}\n"
    )
    cfg = config_module.load(Path("etc/dr.yaml"))  # a relative config path works as well
    assert cfg.storage.resolved_url() == str(folder / "kafka-backups")
    assert cfg.backup.scratch_dir == str(folder / ".." / "scratch")
    assert cfg.offset_reset.mapping_file == str(folder / "mapping.json")
    assert cfg.drill.report_path == str(folder / "reports" / "drill.json")
    # The defaults of folder keys belong beside the file too.
    assert cfg.three_phase.state_dir == str(folder / "three-phase-state")
    assert cfg.offset_reset.snapshot_dir == str(folder / "offset-snapshots")
    assert cfg.mapping.spark_jars == [str(folder / "jars" / "kafka.jar"), "hdfs://nn/jars/x.jar"]
    assert cfg.mapping.kafka_options == {
        "kafka.ssl.truststore.location": str(folder / "ts.jks"),
        "ssl.endpoint.identification.algorithm": "",
    }
    assert cfg.source is not None
    assert cfg.target is not None
    assert cfg.source.security.ssl_ca_location == str(folder / "tls" / "ca.pem")
    assert cfg.source.security.ssl_certificate_location == "/abs/cert.pem"
    assert cfg.source.properties == {
        "ssl.crl.location": str(folder / "tls" / "crl.pem"),
        "client.id": "backup",
    }
    assert cfg.target.security.ssl_ca_location == "probe"  # librdkafka's "find the system's CAs"


@pytest.mark.parametrize(
    ("storage", "url"),
    [
        ("{url: 's3://b/p'}", "s3://b/p"),
        ("{url: 'file:///data/x'}", "file:///data/x"),
        ("{backend: s3, bucket: b}", "s3://b"),
        ("{backend: filesystem, path: data}", "{folder}/data"),
        ("{}", "{folder}/kafka-backups"),
    ],
)
def test_storage_location_is_anchored_only_when_it_is_a_relative_folder(
    tmp_path: Path, storage: str, url: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"storage: {storage}\n")
    assert config_module.load(path).storage.resolved_url() == url.format(folder=tmp_path)
