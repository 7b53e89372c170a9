"""SASL and TLS on a real broker, and known secrets searched for in everything the commands write.

One extra single-node cluster (``secure_cluster``) listens with SASL_PLAINTEXT
(SCRAM-SHA-256 and -512, the user seeded when its storage was formatted, and
PLAIN with the same user) and with TLS (a self-signed certificate for
127.0.0.1), beside a PLAINTEXT listener that only the test set-up uses. Every
command under test reaches it through the SASL or the TLS listener; SASL
passwords come from the environment (``${KB_TEST_SASL_PASSWORD}`` in the
config file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from kbackup.core.cache import cache_root
from kbackup.core.errors import KafkaOperationError, NotFoundError, PreconditionError, StorageError
from kbackup.sandbox.emulators import S3_REGION, S3Server
from kbackup.sandbox.jars import kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.conftest import TEST_BUCKET
from tests.support.cli_run import RunCli
from tests.support.folders import files_under
from tests.support.kafka_io import Record, admin, commit_group, consume_all, create_topic, produce

SASL_USER = "kbackup"
#: Known secrets, searched for in everything written. Each is distinctive enough not to occur by chance.
SASL_PASSWORD = "scram-Pa55w0rd-7f3e9c"
SSL_KEY_PASSWORD = "sslkey-Pa55-3c1d8e"
S3_SECRET_KEY = "s3-Secret-Key-9a8b7c6d5e"
S3_ACCESS_KEY = "s3-Access-Key-4f5e6d"
WRONG_PASSWORD = "wrong-Pa55w0rd-0a1b2c"
ALL_SECRETS = (SASL_PASSWORD, SSL_KEY_PASSWORD, S3_SECRET_KEY, S3_ACCESS_KEY, WRONG_PASSWORD)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    cluster = LocalKafkaCluster(
        name="secure",
        work_dir=tmp_path_factory.mktemp("secure-kafka"),
        libs=kafka_libs(),
        scram_users={SASL_USER: SASL_PASSWORD},
        tls=True,
    )
    cluster.start(timeout=180)
    yield cluster
    cluster.stop()


def sasl_connection(cluster: LocalKafkaCluster, mechanism: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": [cluster.sasl_bootstrap_servers],
        "connect_timeout_secs": 6,
        "security": {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_username": SASL_USER,
            "sasl_password": password,
        },
    }


def tls_connection(cluster: LocalKafkaCluster, ca_file: Path | None) -> dict[str, Any]:
    security: dict[str, str] = {"security_protocol": "SSL"}
    if ca_file is not None:
        security["ssl_ca_location"] = str(ca_file)
    return {
        "bootstrap_servers": [cluster.ssl_bootstrap_servers],
        "connect_timeout_secs": 6,
        "security": security,
    }


def secured_connection(cluster: LocalKafkaCluster, via: str) -> dict[str, Any]:
    """``via``: a SASL mechanism (password from ``${KB_TEST_SASL_PASSWORD}``) or TLS with the sandbox's CA."""
    if via == "TLS":
        return tls_connection(cluster, cluster.tls_ca_file)
    return sasl_connection(cluster, via, "${KB_TEST_SASL_PASSWORD}")


def write_config(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def seed_topic(cluster: LocalKafkaCluster, topic: str, count: int) -> list[bytes]:
    create_topic(cluster, topic, partitions=1)
    values = [f"value-{i}".encode() for i in range(count)]
    produce(cluster, topic, [Record(key=b"k", value=value) for value in values])
    return values


@pytest.mark.parametrize(
    ("backup_via", "restore_via"),
    [("SCRAM-SHA-512", "SCRAM-SHA-256"), ("PLAIN", "TLS")],
    ids=["scram-512-then-256", "plain-then-tls"],
)
def test_backup_and_restore_through_secured_listeners(
    backup_via: str,
    restore_via: str,
    secure_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each SASL mechanism with the password from the environment, and TLS trusting the sandbox's CA."""
    values = seed_topic(secure_cluster, unique_name, 25)
    monkeypatch.setenv("KB_TEST_SASL_PASSWORD", SASL_PASSWORD)
    config = write_config(
        tmp_path / "secured.yaml",
        {
            "backup_id": "secured",
            "source": {
                **secured_connection(secure_cluster, backup_via),
                "topics": {"include": [unique_name]},
            },
            "target": secured_connection(secure_cluster, restore_via),
            "storage": {"url": str(tmp_path / "store")},
            "backup": {"source_cluster_id": "secured-source"},
            "restore": {"topic_mapping": {unique_name: f"{unique_name}-restored"}},
        },
    )
    code, out, err = cli("backup", "-c", str(config), "--json")
    assert code == 0, err
    assert json.loads(out)["records"] == 25
    code, out, err = cli("restore", "-c", str(config), "--json")
    assert code == 0, err
    restored = consume_all(secure_cluster, f"{unique_name}-restored")
    assert [record.value for record in restored] == values
    assert dict(restored[0].headers)["x-kafka-backup-offset"] == b"0"
    assert SASL_PASSWORD not in out + err


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_tls_without_the_brokers_ca_fails_clearly_and_changes_nothing(
    command: str,
    secure_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    """The certificate is self-signed: without ssl_ca_location the system's CAs do not vouch for it."""
    seed_topic(secure_cluster, unique_name, 3)
    store = tmp_path / "store"
    trusted = tls_connection(secure_cluster, secure_cluster.tls_ca_file)
    untrusted = tls_connection(secure_cluster, None)
    document = {
        "backup_id": "b",
        "source": {**(trusted if command == "restore" else untrusted), "topics": {"include": [unique_name]}},
        "target": untrusted,
        "storage": {"url": str(store)},
        "restore": {"topic_mapping": {unique_name: f"{unique_name}-restored"}},
    }
    config = write_config(tmp_path / "tls.yaml", document)
    if command == "restore":  # a real backup to restore, made over TLS with the CA
        assert cli("backup", "-c", str(config))[0] == 0
    before = files_under(tmp_path)
    code, _, err = cli(command, "-c", str(config))
    assert code == KafkaOperationError.exit_code, err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"kafka-backup: error: TLS with {secure_cluster.ssl_bootstrap_servers} failed")
    assert "certificate verify failed" in lines[0]
    assert len(lines) == 2
    assert lines[1].startswith("kafka-backup: next step: check security.ssl_ca_location")
    after = files_under(tmp_path)
    assert after == before
    assert f"{unique_name}-restored" not in admin(secure_cluster).list_topics(timeout=10).topics


@pytest.mark.spark
@pytest.mark.parametrize("listener", ["SCRAM", "TLS"])
def test_spark_submit_script_maps_a_secured_target_from_a_config_file(
    listener: str,
    secure_cluster: LocalKafkaCluster,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kbackup.cli.spark_submit -c: the target's SASL settings (the password from the env), or its TLS
    CA file, come from the config; Spark's Java client reads the PEM as its trust store."""
    from kbackup.cli.spark_submit import main as submit_main
    from kbackup.format.mapping_file import read_mapping

    seed_topic(secure_cluster, unique_name, 30)
    monkeypatch.setenv("KB_TEST_SASL_PASSWORD", SASL_PASSWORD)
    connection = secured_connection(secure_cluster, "SCRAM-SHA-512" if listener == "SCRAM" else "TLS")
    config = write_config(
        tmp_path / "secured.yaml",
        {
            "backup_id": "secured-map",
            "source": {**connection, "topics": {"include": [unique_name]}},
            "target": connection,
            "storage": {"url": str(tmp_path / "store")},
            "backup": {"source_cluster_id": "scram-source"},
            "restore": {"topic_mapping": {unique_name: f"{unique_name}-restored"}},
        },
    )
    for command in ("backup", "restore"):
        code, _, err = cli(command, "-c", str(config))
        assert code == 0, err
    output = tmp_path / "mapping.json"
    # No --bootstrap-servers and no --source-cluster: both from the config.
    code = submit_main(["-c", str(config), "-t", f"{unique_name}-restored", "-o", str(output)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    mapping = read_mapping(output)
    assert mapping.records == 30
    assert [(r.source_start, r.source_end, r.target_start, r.target_end) for r in mapping.ranges] == [
        (0, 29, 0, 29)
    ]
    assert SASL_PASSWORD not in captured.out + captured.err + output.read_text()


@pytest.mark.spark
@pytest.mark.parametrize("listener", ["SCRAM", "TLS"])
def test_show_offset_mapping_with_bootstrap_flag_keeps_the_configs_security(
    listener: str,
    secure_cluster: LocalKafkaCluster,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``show-offset-mapping -c cfg.yaml -b HOST:PORT``: the flag replaces only the target's servers;
    its SASL settings (password from the environment) or TLS CA file stay the config's."""
    from kbackup.format.mapping_file import read_mapping

    seed_topic(secure_cluster, unique_name, 30)
    monkeypatch.setenv("KB_TEST_SASL_PASSWORD", SASL_PASSWORD)
    connection = secured_connection(secure_cluster, "SCRAM-SHA-512" if listener == "SCRAM" else "TLS")
    restored = f"{unique_name}-restored"
    document = {
        "backup_id": "flag-map",
        "source": {**connection, "topics": {"include": [unique_name]}},
        "target": connection,
        "storage": {"url": str(tmp_path / "store")},
        "backup": {"source_cluster_id": "flag-source"},
        "restore": {"topic_mapping": {unique_name: restored}},
    }
    config = write_config(tmp_path / "secured.yaml", document)
    for command in ("backup", "restore"):
        code, _, err = cli(command, "-c", str(config))
        assert code == 0, err
    # The config names a host that does not exist: only -b reaches the broker, with the file's security.
    elsewhere = {**connection, "bootstrap_servers": ["kafka-dr.invalid:9093"]}
    mapping_config = write_config(tmp_path / "elsewhere.yaml", {**document, "target": elsewhere})
    listener_servers = connection["bootstrap_servers"][0]
    output = tmp_path / "mapping.json"
    code, out, err = cli(
        "show-offset-mapping", "-c", str(mapping_config), "-b", listener_servers,
        "-t", restored, "--source-cluster", "flag-source", "-o", str(output),
    )  # fmt: skip
    assert code == 0, err
    mapping = read_mapping(output)
    # Restored in one transaction: source 0..29 at target 0..29, its commit marker after them.
    assert mapping.records == 30
    assert [(r.source_start, r.source_end, r.target_start, r.target_end) for r in mapping.ranges] == [
        (0, 29, 0, 29)
    ]
    assert SASL_PASSWORD not in out + err + output.read_text()


@pytest.mark.parametrize(
    ("command", "mechanism"),
    [("backup", "SCRAM-SHA-512"), ("restore", "SCRAM-SHA-512"), ("backup", "PLAIN")],
)
def test_wrong_sasl_password_fails_clearly_and_changes_nothing(
    command: str,
    mechanism: str,
    secure_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_topic(secure_cluster, unique_name, 3)
    store = tmp_path / "store"
    if command == "restore":  # a real backup to restore, made with the right password
        monkeypatch.setenv("KB_TEST_SASL_PASSWORD", SASL_PASSWORD)
        good = write_config(
            tmp_path / "good.yaml",
            {
                "backup_id": "b",
                "source": {
                    **sasl_connection(secure_cluster, "SCRAM-SHA-256", "${KB_TEST_SASL_PASSWORD}"),
                    "topics": {"include": [unique_name]},
                },
                "storage": {"url": str(store)},
            },
        )
        assert cli("backup", "-c", str(good))[0] == 0
    before = files_under(tmp_path)
    monkeypatch.setenv("KB_TEST_SASL_PASSWORD", WRONG_PASSWORD)
    connection = sasl_connection(secure_cluster, mechanism, "${KB_TEST_SASL_PASSWORD}")
    config = write_config(
        tmp_path / "wrong.yaml",
        {
            "backup_id": "b",
            "source": {**connection, "topics": {"include": [unique_name]}},
            "target": connection,
            "storage": {"url": str(store)},
            "restore": {"topic_mapping": {unique_name: f"{unique_name}-restored"}},
        },
    )
    code, out, err = cli(command, "-c", str(config))
    assert code == KafkaOperationError.exit_code, err
    lines = err.strip().splitlines()
    assert lines[0].startswith(
        f"kafka-backup: error: authentication with {secure_cluster.sasl_bootstrap_servers}"
    )
    assert "SASL_AUTHENTICATION_FAILED" in lines[0] or "_AUTHENTICATION" in lines[0]
    assert len(lines) == 2
    assert lines[1].startswith("kafka-backup: next step: check security.sasl_username")
    assert WRONG_PASSWORD not in out + err
    assert SASL_PASSWORD not in out + err
    # Nothing changed: no file in the storage folder, no restored topic on the cluster.
    after = files_under(tmp_path, leave_out="wrong.yaml")
    assert after == before
    assert f"{unique_name}-restored" not in admin(secure_cluster).list_topics(timeout=10).topics


# -- secrets never leak --------------------------------------------------------------------------


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real console entry point in its own process: everything it writes to stdout and stderr
    (librdkafka's native output included) is captured."""
    return subprocess.run(
        [sys.executable, "-m", "kbackup", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def bucket_objects(s3_server: S3Server, prefix: str) -> dict[str, bytes]:
    client = s3_server.client()
    objects = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=TEST_BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            objects[item["Key"]] = client.get_object(Bucket=TEST_BUCKET, Key=item["Key"])["Body"].read()
    return objects


@dataclass
class LeakScenario:
    """A backup to moto's S3 and restores on the SCRAM cluster, configured with every kind of secret.

    The SASL password and the S3 secret key come from the environment, the SSL key password and
    the S3 access key from the file itself. Everything each command prints is kept in ``outputs``.
    """

    cluster: LocalKafkaCluster
    s3_server: S3Server
    topic: str
    group: str
    tmp_path: Path
    outputs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work = self.tmp_path / "work"
        self.work.mkdir()
        self.prefix = f"leak-{self.topic}"
        self.env = {
            **os.environ,
            "KB_TEST_SASL_PASSWORD": SASL_PASSWORD,
            "KB_TEST_S3_SECRET": S3_SECRET_KEY,
            "KBACKUP_NO_PROGRESS": "1",
        }
        connection = sasl_connection(self.cluster, "SCRAM-SHA-256", "${KB_TEST_SASL_PASSWORD}")
        # An SSL key password in the file itself (librdkafka ignores it on a SASL_PLAINTEXT connection).
        connection["security"]["ssl_key_password"] = SSL_KEY_PASSWORD
        self.document: dict[str, Any] = {
            "backup_id": "leak",
            "source": {**connection, "topics": {"include": [self.topic]}},
            "target": connection,
            "storage": {
                "url": f"s3://{TEST_BUCKET}/{self.prefix}",
                "endpoint_url": self.s3_server.endpoint_url,
                "region": S3_REGION,
                "access_key_id": S3_ACCESS_KEY,
                "secret_access_key": "${KB_TEST_S3_SECRET}",
            },
            "backup": {"source_cluster_id": "leak-source"},
            "restore": {"topic_mapping": {self.topic: f"{self.topic}-restored"}},
            "offset_reset": {
                "strategy": "header-based",
                "source_cluster": "leak-source",
                "groups": [self.group],
                "snapshot_dir": str(self.work / "snapshots"),
            },
            "three_phase": {"state_dir": str(self.work / "three-phase-state")},
            "mapping": {"spark_conf": {"spark.ui.enabled": "false"}},
        }
        self.config = write_config(self.tmp_path / "leak.yaml", self.document)
        self.c = ["-c", str(self.config)]

    def variant(self, name: str, **sections: Any) -> list[str]:
        """``-c FILE`` of a copy of the config with some sections replaced."""
        return ["-c", str(write_config(self.tmp_path / f"{name}.yaml", {**self.document, **sections}))]

    def run(self, args: list[str], expected: int, **env: str) -> str:
        result = run_cli(args, {**self.env, **env}, self.work)
        assert result.returncode == expected, (args, result.stdout[-2000:], result.stderr[-3000:])
        self.outputs[" ".join(args)] = result.stdout + result.stderr
        return result.stdout

    def texts(self) -> list[tuple[str, str]]:
        """(where, text) of everything the commands printed or wrote: their outputs, every file below
        the work folder, and every object in the bucket, Parquet decoded column by column too (its
        zstd pages hide strings from a search of the raw bytes)."""
        written = {f"s3://{key}": body for key, body in bucket_objects(self.s3_server, self.prefix).items()}
        assert any(key.endswith(".parquet") for key in written), sorted(written)
        for path in self.work.rglob("*"):
            if path.is_file():
                written[str(path)] = path.read_bytes()
        texts = [*self.outputs.items(), *((key, body.decode("latin-1")) for key, body in written.items())]
        texts += [
            (f"{key} (decoded)", decoded_parquet(body))
            for key, body in written.items()
            if key.endswith(".parquet")
        ]
        return texts

    def assert_nothing_leaked(self) -> None:
        """No known secret anywhere in :meth:`texts`."""
        assert any("Traceback" in text for text in self.outputs.values()), "no --debug traceback was produced"
        leaks = found_in(ALL_SECRETS, self.texts())
        assert not leaks, leaks


def decoded_parquet(body: bytes) -> str:
    """Every value of every column of a Parquet file, as text (bytes read as latin-1, so any byte
    sequence a secret could be stored as shows)."""
    table = pq.read_table(pa.BufferReader(body))
    return json.dumps(
        table.to_pylist(),
        default=lambda value: value.decode("latin-1") if isinstance(value, bytes) else str(value),
    )


def found_in(strings: Iterable[str], texts: list[tuple[str, str]]) -> list[str]:
    return [f"{string!r} in {where}" for string in strings for where, text in texts if string in text]


@pytest.fixture
def leak_scenario(
    secure_cluster: LocalKafkaCluster, s3_server: S3Server, unique_name: str, tmp_path: Path
) -> LeakScenario:
    seed_topic(secure_cluster, unique_name, 40)
    group = f"{unique_name}-g"
    commit_group(secure_cluster, group, {(unique_name, 0): 15})
    return LeakScenario(secure_cluster, s3_server, unique_name, group, tmp_path)


@pytest.mark.slow
def test_known_secrets_never_appear_in_anything_the_commands_write(leak_scenario: LeakScenario) -> None:
    leak, c = leak_scenario, leak_scenario.c
    plan = leak.work / "plan.json"
    leak.run(["check", *c, "--json"], 0)
    leak.run(["-v", "backup", *c, "--json"], 0)
    # JSON logs and metrics textfiles (the work folder, searched below) of a backup and a restore.
    json_log = ["-v", "--log-format", "json"]
    leak.run([*json_log, "backup", *c, "--metrics-textfile", str(leak.work / "backup.prom")], 0)
    leak.run(["list", *c, "--json"], 0)
    leak.run(["describe", *c, "--json"], 0)
    leak.run(["validate", "--deep", *c, "--json"], 0)
    leak.run([*json_log, "restore", *c, "--json", "--metrics-textfile", str(leak.work / "restore.prom")], 0)
    leak.run(["offset-reset", "plan", *c, "--output", str(plan), "--json"], 0)
    leak.run(["offset-reset", "execute", "--plan", str(plan), *c, "--json"], 0)
    snapshot_id = json.loads(leak.run(["offset-rollback", "--list", *c, "--json"], 0))[0]["snapshot_id"]
    leak.run(["offset-rollback", "--snapshot", snapshot_id, *c, "--json"], 0)
    # Failing variants, with --debug so that tracebacks are printed.
    leak.run(["--debug", "restore", *c, "--backup-id", "no-such-backup"], NotFoundError.exit_code)
    bad_bucket = {**leak.document["storage"], "url": "s3://no-such-bucket-kbackup/x"}
    leak.run(["--debug", "list", *leak.variant("bad-bucket", storage=bad_bucket)], StorageError.exit_code)
    leak.run(
        ["--debug", "-v", "backup", *c], KafkaOperationError.exit_code, KB_TEST_SASL_PASSWORD=WRONG_PASSWORD
    )
    leak.run(
        ["--debug", *json_log, "backup", *c],
        KafkaOperationError.exit_code,
        KB_TEST_SASL_PASSWORD=WRONG_PASSWORD,
    )
    foreign = json.loads(plan.read_text())
    foreign["target"]["cluster_id"] = "another-cluster-id"
    foreign_plan = leak.work / "foreign-plan.json"
    foreign_plan.write_text(json.dumps(foreign))
    leak.run(
        ["--debug", "offset-reset", "execute", "--plan", str(foreign_plan), *c], PreconditionError.exit_code
    )
    assert (leak.work / "snapshots").is_dir()
    # What the search below covers: the JSON lines and both textfiles were written.
    assert any(line.startswith('{"time"') for text in leak.outputs.values() for line in text.splitlines())
    assert "kafka_backup_restore_records_total" in (leak.work / "restore.prom").read_text()
    assert "kafka_backup_records_total" in (leak.work / "backup.prom").read_text()
    leak.assert_nothing_leaked()


def test_the_leak_search_finds_what_is_written_inside_compressed_segments(
    leak_scenario: LeakScenario,
) -> None:
    """The search can fail: a record value (not a secret, known to be written) is found by it, inside
    the backup's zstd-compressed segments, where a search of the raw bytes alone misses it."""
    leak, c = leak_scenario, leak_scenario.c
    leak.run(["backup", *c, "--json"], 0)
    marker = "value-37"  # one of the records seed_topic wrote
    texts = leak.texts()
    decoded = [(where, text) for where, text in texts if where.endswith("(decoded)")]
    raw_segments = [(where, text) for where, text in texts if where.endswith(".parquet")]
    assert raw_segments
    assert found_in([marker], decoded)
    assert not found_in([marker], raw_segments)


@pytest.mark.slow
@pytest.mark.spark
def test_known_secrets_never_appear_in_what_the_spark_commands_write(leak_scenario: LeakScenario) -> None:
    """three-phase-restore, show-offset-mapping and drill give the SASL password to Spark's Kafka
    client; with engine: spark the three-phase restore and the drill also hand the SASL password and
    the S3 keys to Spark tasks (inside the pickled task, never in Spark's settings). None of it is
    in Spark's event log (what its UI shows: settings, job and stage descriptions, task failures),
    Spark's own log, or anything else written."""
    leak, c = leak_scenario, leak_scenario.c
    since = time.time()
    events = leak.work / "spark-events"
    events.mkdir()
    # Uncompressed (Spark 4 compresses event logs by default), so that the search reads them.
    log_events = {"enabled": "true", "dir": events.as_uri(), "compress": "false"}
    spark = {
        "engine": "spark",
        "mapping": {"spark_conf": {f"spark.eventLog.{key}": value for key, value in log_events.items()}},
    }
    leak.run(["backup", *c], 0)
    three_phase = {"topic_mapping": {leak.topic: f"{leak.topic}-3p"}}
    c3 = leak.variant("three-phase", restore=three_phase, **spark)
    leak.run(["-v", "three-phase-restore", *c3, "--json"], 0)
    mapping = leak.work / "mapping.json"
    show = ["show-offset-mapping", "--topic", f"{leak.topic}-3p", "--source-cluster", "leak-source"]
    leak.run(["-v", *show, *c, "--output", str(mapping), "--json"], 0)
    assert json.loads(mapping.read_text())["topics"][0]["target_topic"] == f"{leak.topic}-3p"
    leak.run(["--debug", *show, *c], KafkaOperationError.exit_code, KB_TEST_SASL_PASSWORD=WRONG_PASSWORD)
    # The drill: its own backup (on the Spark engine), a three-phase restore under the drill prefix,
    # and a report (JSON, HTML).
    report = leak.work / "drill-report.json"
    drill = leak.variant("drill", backup_id="leak-drill", **spark)
    leak.run(["-v", "drill", *drill, "--report", str(report), "--json"], 0)
    drill_report = json.loads(report.read_text())
    assert drill_report["passed"] is True
    assert f"drill.{leak.group}" in drill_report["groups"]
    assert report.with_suffix(".html").exists()
    # The search covers what Spark wrote: the event logs of both engine runs, with their jobs and tasks.
    logged = "\n".join(path.read_text(errors="replace") for path in events.rglob("*") if path.is_file())
    assert logged.count('"Event":"SparkListenerApplicationStart"') == 2
    assert "kafka-backup backup leak-drill" in logged
    assert "kafka-backup restore leak" in logged
    assert '"Event":"SparkListenerTaskEnd"' in logged
    spark_logs = [
        path for path in (cache_root() / "spark-logs").glob("*.log") if path.stat().st_mtime >= since
    ]
    assert spark_logs
    leak.outputs.update({str(path): path.read_text(errors="replace") for path in spark_logs})
    leak.assert_nothing_leaked()
