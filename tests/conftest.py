"""Shared fixtures: two real local Kafka clusters, moto's S3 server, Azurite, fake-gcs-server and a
tuned local Spark session.

Services start once per test session, on first use, so unit-only runs
(``pytest -m "not integration"``) never start a JVM.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbackup.sandbox.emulators import Azurite, GcsServer, S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.cli_run import RunCli, cli_in_process

# Progress bars would interleave with pytest's output.
os.environ.setdefault("KBACKUP_NO_PROGRESS", "1")

# Every JVM the tests start (Kafka nodes and their tools, Spark drivers, executors and standalone
# clusters, MirrorMaker) compiles with the quick JIT only: the suite's JVMs live seconds to minutes
# and move little data, and C2's compiling was a third of their CPU on these 2 cores (a 3-node
# cluster's start, load and stop: 41-44 CPU s, 22-25 with C1 alone; two test files: 189 against
# 123). The benchmarks and `make demo` do not load this file: their JVMs keep the full JIT.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

TEST_BUCKET = "kbackup-test"


@pytest.fixture(autouse=True)
def _forget_registered_secrets() -> Iterator[None]:
    """Each test starts with the secrets registered before it (none of another test's).

    The redactor is process-wide: a test whose config holds the password ``test`` would otherwise
    mask every later path under /tmp/pytest-of-root/ on the same worker, as ``/tmp/py***-of-root``.
    """
    from kbackup.core import secrets

    before = set(secrets._registered)
    yield
    with secrets._lock:
        secrets._registered.clear()
        secrets._registered.update(before)


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalKafkaCluster]]:
    """Two independent single-node KRaft clusters, with different cluster ids."""
    from kbackup.sandbox.kafka import local_clusters

    base = tmp_path_factory.mktemp("kafka")
    with local_clusters(["source", "target"], base) as clusters:
        yield {cluster.name: cluster for cluster in clusters}


@pytest.fixture(scope="session")
def source_cluster(kafka_clusters: dict[str, LocalKafkaCluster]) -> LocalKafkaCluster:
    return kafka_clusters["source"]


@pytest.fixture(scope="session")
def target_cluster(kafka_clusters: dict[str, LocalKafkaCluster]) -> LocalKafkaCluster:
    return kafka_clusters["target"]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """``cli(*args)`` runs ``kafka-backup ARGS`` in-process: (exit code, stdout, stderr)."""
    return cli_in_process(capsys)


_names = itertools.count()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/group/prefix name unique in this test session, readable in broker logs."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{next(_names)}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's standalone server on a loopback port, with the test bucket created."""
    server = S3Server(log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    server.client().create_bucket(Bucket=TEST_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's blob service on a loopback port (one per worker), with the test container created."""
    server = Azurite(folder=tmp_path_factory.mktemp("azurite"))
    server.start()
    server.service().create_container(TEST_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsServer]:
    """fake-gcs-server on a loopback port (one per worker), with the test bucket created."""
    server = GcsServer(log_path=tmp_path_factory.mktemp("fake-gcs") / "fake-gcs.log")
    server.start()
    server.create_bucket(TEST_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local[2] SparkSession for the whole run, with Spark's Kafka source resolved from Maven."""
    from kbackup.mapping.spark_session import build_spark_session

    warehouse = tmp_path_factory.mktemp("spark")
    session = build_spark_session(
        "local[2]",
        app_name="kafka-backup-tests",
        extra_conf={
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={warehouse}",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def fixture_path() -> Path:
    return Path(__file__).parent / "fixtures"


_SERVICE_FIXTURES = {
    "kafka_clusters",
    "source_cluster",
    "target_cluster",
    "s3_server",
    "azurite",
    "gcs_server",
    "spark",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/integration, or using a service fixture, get the ``integration`` marker;
    then the files with a slow or a Spark test go first.

    ``make test`` runs the suite on two workers (pytest-xdist, ``--dist loadfile``: a file's
    tests stay on one worker, with its module fixtures), which take files in collection order:
    the long files started first leave short ones to fill the end, instead of one worker
    finishing a crash loop alone while the other waits."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "integration" in item.path.parts or fixtures & _SERVICE_FIXTURES:
            item.add_marker(pytest.mark.integration)
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
    long_files = {
        item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("spark")
    }
    items.sort(key=lambda item: item.path not in long_files)  # stable: the order within stays
