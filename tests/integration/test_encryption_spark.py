"""Spark reads an encrypted backup's segments as Parquet, with the settings ``parquet-key`` writes,
and its UI does not show the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.format.encryption import unlock
from kbackup.sandbox.jars import MavenArtifact, resolve_jars
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.storage import open_storage
from tests.support.backup_io import take_backup
from tests.support.kafka_io import Record, create_topic, produce

#: parquet-java's key-list KMS client lives in parquet-hadoop's test jar, of the version pyspark ships.
PARQUET_VERSION = "1.15.2"

READER = """
import json, sys, urllib.request
from pyspark.sql import SparkSession

properties, data, ui_port = sys.argv[1], sys.argv[2], sys.argv[3]
builder = SparkSession.builder.master("local[1]").appName("read-encrypted")
for line in open(properties):
    if line.strip() and not line.startswith("#"):
        name, _, value = line.rstrip("\\n").partition("=")
        builder = builder.config(name, value)
spark = builder.config("spark.ui.port", ui_port).getOrCreate()
frame = spark.read.option("recursiveFileLookup", "true").parquet(data)
rows = frame.orderBy("partition", "offset").select("partition", "offset", "key", "value").collect()
app = spark.sparkContext.applicationId
with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/v1/applications/{app}/environment") as answer:
    environment = json.load(answer)
print(json.dumps({
    "rows": [[r.partition, r.offset, bytes(r.key).decode(), bytes(r.value).decode()] for r in rows],
    "spark_properties": environment["sparkProperties"],
    "hadoop_properties": environment.get("hadoopProperties", []),
}))
spark.stop()
"""


@pytest.mark.slow
def test_spark_reads_encrypted_segments_with_the_parquet_key_and_hides_it(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"{unique_name}-t"
    create_topic(source_cluster, topic, partitions=2)
    produce(
        source_cluster,
        topic,
        [Record(key=b"k%d" % i, value=b"secret value %d" % i, partition=i % 2) for i in range(60)],
    )
    key_file = tmp_path / "backup.key"
    assert run(["keygen", "--output", str(key_file)]) == 0
    settings = StorageSettings(
        url=str(tmp_path / "store"), encryption=EncryptionSettings(key_file=str(key_file))
    )
    take_backup(source_cluster, settings, "nightly", [topic], segment_max_records=10)
    properties = tmp_path / "spark.properties"
    code = run(
        ["parquet-key", "-p", str(tmp_path / "store"), "--backup-id", "nightly", "--encryption-key",
         f"file:{key_file}", "--output", str(properties)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert oct(properties.stat().st_mode & 0o777) == "0o600"
    keys = unlock(open_storage(settings), "nightly")
    assert keys is not None
    assert keys.master_key_id in capsys.readouterr().out  # the id is printed, the key is not
    # A Parquet reader without the key cannot open a segment.
    segment = BackupCatalog(open_storage(settings)).load("nightly").manifests[0].segments[0]
    import pyarrow.parquet as pq

    with pytest.raises(OSError, match="encrypted"):
        pq.read_table(tmp_path / "store" / "nightly" / segment.key)
    jars = resolve_jars(
        "parquet-test-kms",
        [
            MavenArtifact(
                "org.apache.parquet", "parquet-hadoop", PARQUET_VERSION, transitive=False, classifier="tests"
            )
        ],
    )
    script = tmp_path / "read.py"
    script.write_text(READER)
    with properties.open("a") as handle:
        handle.write(f"spark.jars={','.join(str(jar) for jar in jars.glob('*.jar'))}\n")
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            str(properties),
            str(tmp_path / "store" / "nightly" / "data"),
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    expected = sorted([i % 2, i // 2, f"k{i}", f"secret value {i}"] for i in range(60))
    assert sorted(answer["rows"]) == expected
    listed = dict(answer["spark_properties"])
    assert listed["spark.hadoop.parquet.encryption.key.list"] == "*********(redacted)"
    master_key = properties.read_text().split("encryption.key.list=", 1)[1].split("\n", 1)[0]
    assert master_key.split(":", 1)[1] not in result.stdout
