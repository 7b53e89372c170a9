"""Metrics and health of real backups, read as Prometheus and Kubernetes read them (docs/observability.md).

A ``backup --follow`` with ``--metrics-port`` is scraped over HTTP while records are produced at
a steady rate, and every scrape is parsed with prometheus-client's own parser; its broker is
then stopped and started again (a cluster of its own: the shared one must stay up). A one-shot
backup writes the textfile node-exporter reads. Bad metrics settings fail before anything is
copied.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port, local_clusters
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file
from tests.support.faulty_proxy import FaultyProxy
from tests.support.kafka_io import Record, create_topic, produce
from tests.support.metrics_text import Samples, parse, series, total
from tests.support.restore_checks import REPO


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> Samples:
    status, text = get(port, "/metrics")
    assert status == 200, text
    return parse(text)


def eventually(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[str], timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the backup exited ({process.returncode}) before {what}: {err}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class SteadyProducer:
    """Produces ``per_tick`` records every ``tick`` seconds on a thread, counting what was acknowledged."""

    def __init__(
        self, cluster: LocalKafkaCluster, topic: str, *, per_tick: int = 20, tick: float = 0.1
    ) -> None:
        self.cluster, self.topic, self.per_tick, self.tick = cluster, topic, per_tick, tick
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = self.produced
            records = [
                Record(key=b"k%d" % i, value=b"v" * 100, partition=i % 2)
                for i in range(start, start + self.per_tick)
            ]
            produce(self.cluster, self.topic, records)
            self.produced += len(records)
            time.sleep(self.tick)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)


def write_config(path: Path, cluster: LocalKafkaCluster, topic: str, store: Path) -> Path:
    return config_file(
        path,
        backup_id="watched",
        # Long enough that the stopped broker's downtime is waited for, not a failure.
        source={
            "bootstrap_servers": [cluster.bootstrap_servers],
            "topics": {"include": [topic]},
            "connect_timeout_secs": 90,
        },
        storage={"url": str(store)},
        backup={
            "checkpoint_interval_secs": 2,
            "segment_max_interval_ms": 1000,
            "request_timeout_secs": 90,
            "stall_timeout_secs": 300,
        },
    )


@pytest.mark.slow
def test_a_follow_backup_is_scraped_probed_and_rides_out_a_stopped_broker(
    unique_name: str, tmp_path: Path
) -> None:
    with local_clusters(["metrics-source"], tmp_path / "kafka") as (cluster,):
        topic = unique_name
        create_topic(cluster, topic, partitions=2)
        store = tmp_path / "store"
        config = write_config(tmp_path / "backup.yaml", cluster, topic, store)
        port = free_port()
        command = [sys.executable, "-m", "kbackup", "backup", "-c", str(config), "--follow"]
        command += ["--metrics-port", str(port), "--metrics-bind", "127.0.0.1"]
        textfile = tmp_path / "watched.prom"
        command += ["--metrics-textfile", str(textfile)]
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        )
        try:
            eventually(lambda: get_or_none(port, "/readyz") == 200, "the backup is ready", process)
            increment_times: set[float] = set()
            records_seen: list[float] = []
            lags_seen: list[float] = []
            with SteadyProducer(cluster, topic) as producer:
                # Several scrapes while records arrive: the counter only goes up, increments land.
                for _ in range(8):
                    time.sleep(1)
                    found = scrape(port)
                    records_seen.append(total(found, "kafka_backup_records_total", topic=topic))
                    lags_seen.append(total(found, "kafka_backup_lag_records", topic=topic))
                    increment_times.update(
                        series(found, "kafka_backup_last_increment_timestamp_seconds").values()
                    )
                    assert get(port, "/healthz")[0] == 200
            produced = producer.produced
            assert records_seen == sorted(records_seen), records_seen
            assert records_seen[-1] > 0
            # Records arrive between commits: the backup is behind by some of them.
            assert max(lags_seen) > 0, lags_seen

            def caught_up() -> bool:
                found = scrape(port)
                lags = series(found, "kafka_backup_lag_records")
                return (
                    total(found, "kafka_backup_records_total", topic=topic) == produced
                    and len(lags) == 2
                    and all(value == 0 for value in lags.values())
                )

            eventually(caught_up, f"all {produced} records copied and committed", process)
            # A follow run rewrites its textfile after each increment, not only at exit.
            eventually(
                lambda: (
                    total(parse(textfile.read_text()), "kafka_backup_records_total", topic=topic) == produced
                ),
                "the textfile written after the last increment",
                process,
            )
            found = scrape(port)
            increment_times.update(series(found, "kafka_backup_last_increment_timestamp_seconds").values())
            # The last increment's time moved from commit to commit.
            assert len(increment_times) >= 2, increment_times
            assert max(increment_times) == pytest.approx(time.time(), abs=60)
            assert total(found, "kafka_backup_lag_seconds") == 0
            assert total(found, "kafka_backup_increments_total") >= 2
            assert total(found, "kafka_backup_segments_total", topic=topic) >= 2
            assert total(found, "kafka_backup_segment_bytes_total", topic=topic) > 0
            assert total(found, "kafka_backup_increment_commit_duration_seconds_count") >= 2
            assert get(port, "/healthz") == (200, "ok: idle at the end of the log\n")
            assert get(port, "/readyz") == (200, "ok: source and storage answer\n")
            errors_before = total(found, "kafka_backup_source_errors_total")

            # The broker goes away: not ready, errors counted, but alive (restarting would not help).
            cluster.stop()
            eventually(lambda: get_or_none(port, "/readyz") == 503, "readiness fails", process, timeout=60)
            down = scrape(port)
            assert total(down, "kafka_backup_source_errors_total") > errors_before
            assert total(down, "kafka_backup_source_reachable") == 0
            assert get(port, "/readyz")[1].startswith("not ready: the source cluster")
            assert get(port, "/healthz")[0] == 200

            # Back again: ready, and what is produced now is copied and committed too.
            cluster.start()
            produce(cluster, topic, [Record(key=b"after", value=b"x", partition=i % 2) for i in range(10)])
            produced += 10
            eventually(
                lambda: get_or_none(port, "/readyz") == 200, "readiness recovers", process, timeout=120
            )
            eventually(caught_up, "the records produced after the restart copied", process, timeout=120)
            assert total(scrape(port), "kafka_backup_source_reachable") == 1
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
        assert len(read_backup(store, "watched")) == produced


def get_or_none(port: int, path: str) -> int | None:
    """The status of ``path``, or None while nothing listens yet."""
    try:
        return get(port, path)[0]
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "two-workers"])
def test_a_one_shot_backup_writes_its_metrics_to_a_textfile(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, workers: str
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v" * 50, partition=i % 2) for i in range(30)])
    textfile = tmp_path / "node" / "kafka-backup-nightly.prom"
    textfile.parent.mkdir()
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", topic]
    args += ["--path", str(tmp_path / "store"), "--backup-id", "nightly", "--metrics-textfile", str(textfile)]
    args += ["--workers", workers]
    started = time.time()
    assert run(args) == 0
    found = parse(textfile.read_text())
    assert total(found, "kafka_backup_records_total", topic=topic) == 30
    assert total(found, "kafka_backup_segments_total", topic=topic) == 2  # one per partition
    assert total(found, "kafka_backup_segment_bytes_total", topic=topic) > 0
    assert series(found, "kafka_backup_lag_records") == {
        (("backup_id", "nightly"), ("partition", str(p)), ("topic", topic)): 0 for p in (0, 1)
    }
    assert total(found, "kafka_backup_increments_total") == 1
    assert total(found, "kafka_backup_increment_commit_duration_seconds_count") == 1
    [committed_at] = series(found, "kafka_backup_last_increment_timestamp_seconds").values()
    assert started <= committed_at <= time.time()
    assert total(found, "kafka_backup_info", mode="snapshot") == 1
    # Atomic: written beside and renamed, nothing else is left in node-exporter's folder.
    assert [path.name for path in textfile.parent.iterdir()] == [textfile.name]


@pytest.mark.parametrize("bad", ["port in use", "no such address", "textfile folder missing"])
def test_bad_metrics_settings_fail_before_any_record_is_copied(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad: str,
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    store = tmp_path / "store"
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", topic]
    args += ["--path", str(store), "--backup-id", "b1"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flags, expected = {
            "port in use": (
                ["--metrics-port", str(port), "--metrics-bind", "127.0.0.1"],
                f"--metrics-port {port} (metrics.port): port {port} is already in use on 127.0.0.1",
            ),
            "no such address": (
                ["--metrics-port", str(free_port()), "--metrics-bind", "192.0.2.1"],
                "--metrics-bind 192.0.2.1 (metrics.bind_address): not an address of this machine",
            ),
            "textfile folder missing": (
                ["--metrics-textfile", str(tmp_path / "missing" / "b1.prom")],
                f"--metrics-textfile {tmp_path / 'missing' / 'b1.prom'} (metrics.textfile): cannot write it: "
                f"the folder {tmp_path / 'missing'} does not exist",
            ),
        }[bad]
        code = run([*args, *flags])
    err = capsys.readouterr().err.splitlines()
    assert code == 3  # config (docs/exit-codes.md)
    assert err[0] == f"kafka-backup: error: {expected}"
    assert err[1].startswith("kafka-backup: next step: ")
    # Nothing was copied, not even the storage's write probe.
    assert not BackupCatalog(open_storage(str(store))).exists("b1")
    assert not store.exists()


def test_storage_errors_and_retries_are_counted_by_operation(
    source_cluster: LocalKafkaCluster, s3_server: S3Server, unique_name: str, tmp_path: Path
) -> None:
    """The store refuses every connection when the run starts; the run waits it out, and its
    textfile counts the failed tries and the retries (no secret in them)."""
    topic = unique_name
    create_topic(source_cluster, topic)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    proxy = FaultyProxy(upstream_port=s3_server.port)
    textfile = tmp_path / "b1.prom"
    config = tmp_path / "backup.yaml"
    storage: dict[str, str | int] = {
        **s3_server.storage_settings(TEST_BUCKET, f"metrics-{unique_name}"),
        "endpoint_url": proxy.endpoint_url,
        # One try per request inside botocore (max_attempts counts every try, not the retries):
        # every failure reaches the outer loop's count.
        "max_attempts": 1,
    }
    config_file(
        config,
        backup_id="b1",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        storage=storage,
        metrics={"textfile": str(textfile)},
    )
    proxy.set_mode("reset")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbackup", "backup", "-c", str(config)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        )
        # Polled, not slept: the store comes back once the run has failed a try and retried it.
        deadline = time.monotonic() + 120
        while proxy.faults_served < 2 and process.poll() is None:
            assert time.monotonic() < deadline, "the backup never reached the store"
            time.sleep(0.05)
        proxy.set_mode("forward")
        _, err = process.communicate(timeout=120)
    finally:
        proxy.close()
    assert process.returncode == 0, err
    assert proxy.faults_served > 0
    text = textfile.read_text()
    found = parse(text)
    assert total(found, "kafka_backup_storage_errors_total", operation="write", kind="transient") >= 1
    assert total(found, "kafka_backup_storage_retries_total", operation="write") >= 1
    assert total(found, "kafka_backup_storage_errors_total", kind="permanent") == 0
    assert total(found, "kafka_backup_storage_reachable") == 1
    assert total(found, "kafka_backup_records_total", topic=topic) == 5
    for secret in (storage["access_key_id"], storage["secret_access_key"]):
        assert str(secret) not in text
