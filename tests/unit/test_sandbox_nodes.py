"""The sandbox's clusters of several nodes, without a JVM: what each node's broker is told, the
addresses clients get, Kafka's hash of group and transactional ids, and ``sandbox --nodes``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbackup.core.errors import ConfigError
from kbackup.sandbox import kafka
from kbackup.sandbox.kafka import (
    LocalKafkaCluster,
    SandboxError,
    coordinator_partition,
    java_string_hash,
)
from tests.support.cli_run import RunCli


def three_nodes(tmp_path: Path, **kwargs: object) -> LocalKafkaCluster:
    made = LocalKafkaCluster(name="c", work_dir=tmp_path, libs=tmp_path, nodes=3, **kwargs)  # type: ignore[arg-type]
    for node in made.node_ids:
        ports = made.node_ports(node)
        ports.port, ports.controller_port, ports.sasl_port = 9000 + node, 9100 + node, 9200 + node
    made.port, made.controller_port, made.sasl_port = 9001, 9101, 9201
    return made


def test_one_node_keeps_its_properties_folder_and_address(tmp_path: Path) -> None:
    single = LocalKafkaCluster(name="c", work_dir=tmp_path, libs=tmp_path)
    single.port, single.controller_port = 9001, 9002
    props = single._properties()
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9002"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert "default.replication.factor" not in props
    assert "broker.session.timeout.ms" not in props
    assert single.node_dir(1) == tmp_path
    assert single.bootstrap_servers == "127.0.0.1:9001"
    assert single.connection().bootstrap_servers == ["127.0.0.1:9001"]


def test_three_nodes_are_three_voters_replicated_like_production(tmp_path: Path) -> None:
    cluster = three_nodes(tmp_path)
    every = [cluster._properties(node) for node in cluster.node_ids]
    assert [props["node.id"] for props in every] == ["1", "2", "3"]
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert {props["controller.quorum.voters"] for props in every} == {voters}
    assert every[1]["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert every[1]["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9002"
    assert [props["log.dirs"] for props in every] == [str(tmp_path / f"node-{n}" / "data") for n in (1, 2, 3)]
    replicated = {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
        "unclean.leader.election.enable": "false",
        "num.partitions": "1",
    }
    for props in every:
        assert {key: props[key] for key in replicated} == replicated
    assert cluster.bootstrap_servers == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"
    assert cluster.connection().bootstrap_servers == ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"]
    assert cluster.node_connection(2).bootstrap_servers == ["127.0.0.1:9002"]
    assert cluster.data_dir == tmp_path / "node-1" / "data"


def test_three_secured_nodes_each_listen_with_sasl_and_the_super_user_connects_to_all(tmp_path: Path) -> None:
    cluster = three_nodes(tmp_path, scram_users={"admin": "admin-pw"}, super_user="admin")
    assert cluster._properties(3)["listeners"] == (
        "PLAINTEXT://127.0.0.1:9003,SASL_PLAINTEXT://127.0.0.1:9203,CONTROLLER://127.0.0.1:9103"
    )
    assert cluster.connection().bootstrap_servers == ["127.0.0.1:9201", "127.0.0.1:9202", "127.0.0.1:9203"]
    assert cluster.node_connection(3).bootstrap_servers == ["127.0.0.1:9203"]


@pytest.mark.parametrize("nodes", [0, 6])
def test_a_node_count_out_of_range_is_refused(tmp_path: Path, nodes: int) -> None:
    with pytest.raises(SandboxError, match=f"nodes must be 1 to 5, not {nodes}"):
        LocalKafkaCluster(name="c", work_dir=tmp_path, libs=tmp_path, nodes=nodes)


def test_a_node_the_cluster_lacks_is_named_with_the_ones_it_has(tmp_path: Path) -> None:
    cluster = three_nodes(tmp_path)
    with pytest.raises(SandboxError, match="has no node 4: its node ids are 1 to 3"):
        cluster.kill_node(4)
    assert not cluster.node_alive(2)  # never started


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
        ("😀", 0xD83D * 31 + 0xDE00),  # two UTF-16 code units
    ],
)
def test_java_string_hash_is_javas(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_coordinator_partition_is_kafkas_abs_hash_modulo_partitions() -> None:
    assert coordinator_partition("polygenelubricants", 3) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    negative = next(f"group-{i}" for i in range(1000) if java_string_hash(f"group-{i}") < 0)
    assert coordinator_partition(negative, 7) == -java_string_hash(negative) % 7


@pytest.mark.parametrize("nodes", ["0", "6", "x"])
def test_sandbox_refuses_a_node_count_it_cannot_start(cli: RunCli, nodes: str) -> None:
    code, _out, err = cli("sandbox", "--nodes", nodes)
    assert code == ConfigError.exit_code  # a wrong value (docs/exit-codes.md), before any JVM starts
    assert err.startswith("kafka-backup: error: Invalid value for '--nodes'"), err


def test_sandbox_prints_every_node_of_each_cluster(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    @contextlib.contextmanager
    def started(names: list[str], *, nodes: int) -> Iterator[list[LocalKafkaCluster]]:
        asked.append(nodes)
        yield [three_nodes(tmp_path / name) for name in names]

    monkeypatch.setattr(kafka, "local_clusters", started)
    code, out, _err = cli("sandbox", "-n", "1", "--nodes", "3")
    assert code == 0
    assert asked == [3]
    assert "up at 127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003  cluster id" in out


class Running:
    """Stands for a node's JVM that has not exited."""

    def poll(self) -> None:
        return None


def test_the_active_controller_is_the_leader_of_the_highest_epoch_a_running_node_knows(
    tmp_path: Path,
) -> None:
    cluster = three_nodes(tmp_path)
    for node, (leader, epoch) in {1: (2, 4), 2: (2, 3), 3: (1, 5)}.items():
        state = cluster.node_data_dir(node) / "__cluster_metadata-0" / "quorum-state"
        state.parent.mkdir(parents=True)
        state.write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch, "votedId": -1}))
    cluster.processes.update({1: Running(), 2: Running()})  # type: ignore[dict-item]
    assert cluster.active_controller() == 2  # node 3's file (epoch 5) is not read: node 3 is down
    cluster.processes[3] = Running()  # type: ignore[assignment]
    assert cluster.active_controller() == 1
    del cluster.processes[1]
    with pytest.raises(SandboxError, match=r"no active controller now \(last known: node 1, epoch 5\)"):
        cluster.active_controller()


def test_free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port in the kernel's ephemeral range can become an outgoing connection's local port before
    the JVM binds it (a suite run lost a cluster start so): ports come from below the range."""
    monkeypatch.setattr(kafka, "_ephemeral_floor", lambda: kafka.PORT_FLOOR + 1200)
    monkeypatch.setattr(kafka, "_handed_out", set())
    handed = [kafka.free_port() for _ in range(1000)]
    assert all(kafka.PORT_FLOOR <= port < kafka.PORT_FLOOR + 1200 for port in handed)
    assert len(set(handed)) == len(handed)
