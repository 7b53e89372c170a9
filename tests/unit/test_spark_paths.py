"""Spark's driver runs with its working folder in the cache, so every path handed to it is absolute."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.core.config import KafkaConnection
from kbackup.mapping.spark_kafka import spark_kafka_options
from kbackup.mapping.spark_session import spark_conf


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KBACKUP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cache"


def test_the_driver_works_in_the_cache_folder_and_keeps_the_users_java_options(cache: Path) -> None:
    assert spark_conf()["spark.driver.extraJavaOptions"] == f"-Duser.dir={cache / 'spark-driver'}"
    assert (cache / "spark-driver").is_dir()
    conf = spark_conf(extra_conf={"spark.driver.extraJavaOptions": "-Dderby.system.home=/w"})
    assert (
        conf["spark.driver.extraJavaOptions"] == f"-Dderby.system.home=/w -Duser.dir={cache / 'spark-driver'}"
    )
    mine = spark_conf(extra_conf={"spark.driver.extraJavaOptions": "-Duser.dir=/mine"})
    assert mine["spark.driver.extraJavaOptions"] == "-Duser.dir=/mine"


def test_relative_jars_and_kafka_files_mean_the_current_folder(tmp_path: Path) -> None:
    conf = spark_conf(jars=["jars/a.jar", "/opt/b.jar", "hdfs://nn/c.jar"])
    assert conf["spark.jars"] == f"{tmp_path / 'jars' / 'a.jar'},/opt/b.jar,hdfs://nn/c.jar"
    connection = KafkaConnection.model_validate(
        {"bootstrap_servers": "k:1", "security": {"security_protocol": "SSL", "ssl_ca_location": "ca.pem"}}
    )
    options = spark_kafka_options(
        connection, {"kafka.ssl.keystore.location": "ks.jks", "kafka.client.id": "x"}
    )
    assert options["kafka.ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert options["kafka.ssl.keystore.location"] == str(tmp_path / "ks.jks")
    assert options["kafka.client.id"] == "x"
