"""The errors the source cluster's admin client reports are counted in
``kafka_backup_source_errors_total`` (docs/observability.md), not only the consumer's: a one-shot
backup whose first connection to its bootstrap server is reset (a proxy in front of the broker,
reset once, then forwarding) rides it out, and its textfile counts the error the admin client met.
Only the admin client meets the reset: it is the first client a backup opens; the consumer comes
later, bootstraps through the proxy once it forwards, then reads from the broker's own address.

An admin request other than a metadata one (a group listing) reports the errors its client met
while it waited too, whether it was answered or not.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.kafka import Admin, KafkaClients
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from tests.support.config_files import config_file
from tests.support.faulty_proxy import FaultyProxy
from tests.support.kafka_io import Record, create_topic, produce
from tests.support.metrics_text import parse, series, total


def reset_once(proxy: FaultyProxy) -> threading.Thread:
    """Reset connections until one was reset, then forward."""

    def watch() -> None:
        while proxy.faults_served == 0:
            time.sleep(0.001)
        proxy.set_mode("forward")

    proxy.set_mode("reset")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def test_an_error_the_admin_client_meets_is_counted(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    proxy = FaultyProxy(upstream_port=source_cluster.port)
    textfile, config = tmp_path / "backup.prom", tmp_path / "backup.yaml"
    config_file(
        config,
        backup_id="nightly",
        source={"bootstrap_servers": [f"127.0.0.1:{proxy.port}"], "topics": {"include": [topic]}},
        storage={"url": str(tmp_path / "store")},
        metrics={"textfile": str(textfile)},
    )
    try:
        watcher = reset_once(proxy)
        code = run(["backup", "-c", str(config)])
        watcher.join(10)
    finally:
        proxy.close()
    assert code == 0
    assert proxy.faults_served >= 1  # the reset was really met
    found = parse(textfile.read_text())
    assert total(found, "kafka_backup_records_total", topic=topic) == 5
    errors = {
        dict(labels)["kind"]: value
        for labels, value in series(found, "kafka_backup_source_errors_total").items()
    }
    # librdkafka names the failure (a transport error, all brokers down, or both): counted either way.
    assert sum(errors.values()) >= 1, errors
    assert set(errors) <= {"transport", "all_brokers_down"}, errors
    assert total(found, "kafka_backup_source_reachable") == 1


class Recorder:
    """A cluster observer (kbackup.core.kafka.ClusterObserver) that keeps the errors it hears of."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def cluster_error(self, kind: str) -> None:
        self.errors.append(kind)

    def cluster_waiting(self) -> None:
        pass

    def cluster_answered(self) -> None:
        pass


def test_the_errors_an_admin_request_met_while_waiting_are_reported() -> None:
    """No metadata request, no retry (``retry_secs=0``): only the admin client's own error callback
    can report the refused connections, and only if they are served after the wait."""
    recorder = Recorder()
    connection = KafkaConnection(bootstrap_servers=[f"127.0.0.1:{free_port()}"], connect_timeout_secs=2)
    admin = Admin(KafkaClients(connection, observer=recorder), request_timeout=2, retry_secs=0)
    with pytest.raises(KBackupError):
        admin.list_groups()
    assert recorder.errors, "no error reported"
    assert set(recorder.errors) <= {"_TRANSPORT", "_ALL_BROKERS_DOWN"}, recorder.errors
