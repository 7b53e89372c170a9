"""Faults on clusters of several nodes while a command runs: every partition back in sync, a
rolling restart, and a producer that keeps writing and records what Kafka acknowledged (the
oracle of a test that writes through the fault)."""

from __future__ import annotations

import subprocess
import threading
import time
import zipfile
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from kbackup.core.errors import KBackupError
from kbackup.sandbox.jars import classpath
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.cli_process import wait_for
from tests.support.kafka_io import Record

#: Consumer properties that read one small producer batch per fetch: a copy of many fetches.
ONE_BATCH_PER_FETCH = {
    "max.partition.fetch.bytes": 100,
    "fetch.max.bytes": 1000,
    "message.max.bytes": 1000,
    "queued.min.messages": 1,
}


def in_sync_everywhere(cluster: LocalKafkaCluster, topic: str) -> bool:
    """Every partition of ``topic`` has every node in its ISR now (False while the cluster cannot say)."""
    everyone = tuple(cluster.node_ids)
    try:
        return all(replicas.in_sync == everyone for replicas in cluster.partitions_of(topic).values())
    except KBackupError:  # no answer while a node starts or an election runs
        return False


def wait_in_sync_everywhere(cluster: LocalKafkaCluster, topics: list[str], timeout: float = 90) -> None:
    for topic in topics:
        wait_for(
            lambda topic=topic: in_sync_everywhere(cluster, topic), f"{topic} in sync on every node", timeout
        )


def config_command(libs: Path) -> str:
    """The main class of Kafka's ``kafka-configs`` tool: in kafka-tools from 4.4 on, in the broker's
    own jar before."""
    for jar in libs.glob("kafka-tools-*.jar"):
        with zipfile.ZipFile(jar) as archive:
            if "org/apache/kafka/tools/ConfigCommand.class" in archive.namelist():
                return "org.apache.kafka.tools.ConfigCommand"
    return "kafka.admin.ConfigCommand"


def throttle_reads(cluster: LocalKafkaCluster, client_id: str, bytes_per_sec: int | None) -> None:
    """Kafka's own consumer quota on ``client_id`` (each broker then delays its fetches to that
    rate), set through Kafka's ``kafka-configs`` tool; None removes it. A copy made slow this way
    is still running when a fault lands, however fast the machine is."""
    change = (
        ["--add-config", f"consumer_byte_rate={bytes_per_sec}"]
        if bytes_per_sec is not None
        else ["--delete-config", "consumer_byte_rate"]
    )
    command = [
        "java",
        "-cp",
        classpath(cluster.libs),
        config_command(cluster.libs),
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
        *change,
    ]
    subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)


def rolling_restart(cluster: LocalKafkaCluster, topics: list[str], process: subprocess.Popen[str]) -> None:
    """Stop each node cleanly and start it again, one after the other, as a planned upgrade does:
    the next node goes down only once every partition of ``topics`` is back in sync on every node.
    ``process`` (the command under test) must still be running before each stop."""
    for node in cluster.node_ids:
        if process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(
                f"the run ended (exit {process.returncode}) before node {node} was stopped: "
                f"{process.stderr.read()}"
            )
        cluster.stop_node(node)
        cluster.start_node(node)
        wait_in_sync_everywhere(cluster, topics)


@dataclass
class AckedProducer:
    """Writes records to ``topic`` from a thread until :meth:`stop`, round-robin over
    ``partitions``, with acks=all and idempotence; keeps each record Kafka acknowledged (with the
    offset it got) and each error it reported."""

    cluster: LocalKafkaCluster
    topic: str
    partitions: int
    pause_secs: float = 0.01
    acknowledged: list[Record] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)
    unsent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> AckedProducer:
        self._thread = threading.Thread(target=self._write, name=f"acked-producer-{self.topic}", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> list[Record]:
        """Stop writing, wait for every record in flight, and return those acknowledged."""
        self._stop.set()
        assert self._thread is not None, "the producer was never started"
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish its records in flight"
        assert self.unsent == 0, f"{self.unsent} records to {self.topic} still in flight after 90 s"
        return self.acknowledged

    def by_partition(self) -> dict[int, list[Record]]:
        found: dict[int, list[Record]] = {p: [] for p in range(self.partitions)}
        for record in sorted(self.acknowledged, key=lambda r: (r.partition or 0, r.consumed_offset)):
            found[record.partition or 0].append(record)
        return found

    def _delivered(self, sent: Record, error: KafkaError | None, message: Message) -> None:
        """Keeps ``sent`` (what the test wrote: a delivery report carries no headers) at the offset
        Kafka gave it."""
        if error is not None:
            self.errors.append(error)
            return
        self.acknowledged.append(replace(sent, partition=message.partition(), offset=message.offset()))

    def _write(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
            }
        )
        sent = 0
        while not self._stop.wait(self.pause_secs):
            partition, timestamp = sent % self.partitions, int(time.time() * 1000)
            record = Record(
                key=b"k%d" % sent,
                value=b"v%d" % sent,
                headers=(("n", b"%d" % sent),) if sent % 2 == 0 else (),
                timestamp=timestamp,
                partition=partition,
                topic=self.topic,
            )
            producer.produce(
                self.topic,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                partition=partition,
                timestamp=timestamp,
                on_delivery=partial(self._delivered, record),
            )
            producer.poll(0)
            sent += 1
        self.unsent = producer.flush(90)
