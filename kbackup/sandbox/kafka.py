"""Throwaway Apache Kafka clusters (KRaft) on loopback, for tests, the demo and benchmarks.

Each cluster is one or more real broker+controller JVMs (nodes) started from the jars that
:mod:`kbackup.sandbox.jars` resolves, with their own ports and data folders and the cluster's id.
Nothing here is a mock: the tests and the disaster-recovery drill talk to these brokers exactly as
they would to a production cluster. A cluster of three nodes is replicated like a production one
(a three-voter quorum, replication factor 3, ``min.insync.replicas=2``), and each node can be
killed, stopped and started again; finders name the node leading a partition or coordinating a
group or transactional id.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.kafka import Admin, KafkaClients, open_admin, wait_until_answering
from kbackup.core.kafka.admin import PartitionReplicas
from kbackup.core.retry import call_with_retries
from kbackup.sandbox.jars import classpath, kafka_libs

Answer = TypeVar("Answer")


class SandboxError(KBackupError):
    """A local cluster could not be formatted, started or stopped."""

    exit_code = 1
    kind = "sandbox"


#: How many times :meth:`LocalKafkaCluster.start` launches a cluster whose chosen port was taken.
PORT_ATTEMPTS = 3
#: What a node's log says when its port was taken (the JVM's BindException).
PORT_TAKEN = "Address already in use"
#: The lowest port :func:`free_port` hands out.
PORT_FLOOR = 20000
#: Ports :func:`free_port` handed out in this process: never handed out twice.
_handed_out: set[int] = set()


def _ephemeral_floor() -> int:
    """The lowest port of the kernel's ephemeral range (outgoing connections' local ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, not handed out before.

    Chosen at random below the kernel's ephemeral range: a port in that range is also the local
    port of any outgoing connection, so on a busy machine a client's connection could take it
    between this choice and a JVM's bind (seen once in a suite run). Other processes choosing
    here can still collide, rarely: :meth:`LocalKafkaCluster.start` chooses again then."""
    ceiling = _ephemeral_floor()
    for _ in range(100 if ceiling - PORT_FLOOR >= 1000 else 0):
        port = random.randrange(PORT_FLOOR, ceiling)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # an odd range: the kernel's choice
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
    _handed_out.add(chosen)
    return chosen


def _size(path: Path) -> int:
    """A file's size; 0 when it does not exist yet."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64, not starting with '-'."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that started us dies (Linux).

    Keeps a crashed test run from leaving brokers behind. PR_SET_PDEATHSIG
    follows the starting *thread*, so clusters are started from the main thread.
    """
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    os.setsid()


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL if the process does not exit within ``timeout``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def log_tails(paths: Sequence[Path], lines: int) -> str:
    """The last ``lines`` lines of each log file that exists, under its name."""
    chunks = []
    for path in paths:
        if path.exists():
            text = path.read_text(errors="replace").splitlines()
            chunks.append(f"--- {path.name} ---\n" + "\n".join(text[-lines:]))
    return "\n".join(chunks) or "(no log written)"


BASE_PROPERTIES = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    # Let the log cleaner pick up compacted test topics within seconds.
    "log.cleaner.backoff.ms": "500",
    "log.retention.check.interval.ms": "5000",
    # Keep records whatever their timestamps (tests use fixed, old ones); a topic's retention.ms applies.
    "log.retention.ms": "-1",
}

#: The SCRAM mechanisms a cluster with ``scram_users`` seeds its users under.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: The SASL mechanisms a cluster with ``scram_users`` accepts: SCRAM, and PLAIN with the same users.
SASL_MECHANISMS = (*SCRAM_MECHANISMS, "PLAIN")
#: Password of the TLS listener's generated key store (a throwaway certificate on loopback).
_KEYSTORE_PASSWORD = "sandbox-keystore"  # noqa: S105  (not a secret: a test certificate's store)

#: What a cluster of more than one node sets over BASE_PROPERTIES (``_replication_properties``).
REPLICATION_FACTOR = 3
MIN_IN_SYNC_REPLICAS = 2
#: How soon the controller fences a node that stopped heartbeating, and so moves its leaderships
#: and drops it from every ISR (Kafka's default is 9 s; fault tests kill nodes and wait for this).
BROKER_SESSION_TIMEOUT_MS = 3000
#: How long a finder's request may wait for one answer before it is sent again: a request that
#: librdkafka routed to a node just killed (not yet fenced) would otherwise wait out 15 s.
FINDER_REQUEST_SECS = 3.0
#: How long a finder asks again (a new client each time) while no live node answers it.
FINDER_RETRY_SECS = 30.0
#: Largest cluster the sandbox starts (each node is a JVM of ``heap``).
MAX_NODES = 5
#: Topics the brokers hold for coordinators: the group and the transaction coordinators.
GROUP_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"

LOG4J2_PROPERTIES = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
"""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text``: over its UTF-16 code units, as a signed 32-bit int."""
    value = 0
    units = text.encode("utf-16-be")
    for index in range(0, len(units), 2):
        value = (value * 31 + int.from_bytes(units[index : index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` or ``__transaction_state`` that holds a group or a
    transactional id: Kafka's ``Utils.abs(key.hashCode()) % partitions`` (``Utils.abs`` maps
    Integer.MIN_VALUE to 0)."""
    code = java_string_hash(key)
    return (0 if code == -(1 << 31) else abs(code)) % partitions


@dataclass
class NodePorts:
    """The ports of one node of a cluster (0: not chosen yet; SASL and TLS only when enabled)."""

    port: int = 0
    controller_port: int = 0
    sasl_port: int = 0
    ssl_port: int = 0


@dataclass
class LocalKafkaCluster:
    """One KRaft cluster of ``nodes`` JVMs, each a broker and a controller (node ids 1..nodes).

    With one node (the default, which every test and benchmark uses) it is one JVM in ``work_dir``
    with replication factor 1. With more, each node has its own ports, folder (``node-<id>`` under
    ``work_dir``) and log, every node is a voter of the quorum, and topics and the internal topics
    are replicated (see :meth:`_replication_properties`). ``port``, ``controller_port``,
    ``sasl_port`` and ``ssl_port`` are node 1's; :meth:`node_ports` gives any node's.
    """

    name: str
    work_dir: Path
    libs: Path
    port: int = 0
    controller_port: int = 0
    cluster_id: str = field(default_factory=new_cluster_id)
    extra_properties: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    #: SCRAM users (name -> password). When set, the cluster also listens with SASL_PLAINTEXT
    #: (SCRAM-SHA-256 and -512, and PLAIN with the same users) on ``sasl_port``; the SCRAM users are
    #: seeded when the storage is formatted. The PLAINTEXT listener stays (inter-broker traffic,
    #: test set-up); clients under test use :attr:`sasl_bootstrap_servers`.
    scram_users: dict[str, str] = field(default_factory=dict)
    sasl_port: int = 0
    #: When set, the cluster also listens with TLS (``SSL``) on ``ssl_port``, with a self-signed
    #: certificate for 127.0.0.1 made by keytool; clients trust :attr:`tls_ca_file`.
    tls: bool = False
    ssl_port: int = 0
    #: When set (one of ``scram_users``), the cluster runs Kafka's ``StandardAuthorizer`` with this
    #: user as its one super user, and every listener but PLAINTEXT authenticates: see
    #: :meth:`_authorizer_properties`. :meth:`connection` is then this user's, on the SASL listener.
    super_user: str | None = None
    #: How many broker+controller JVMs (1 to MAX_NODES).
    nodes: int = 1
    #: The running JVM of each node started, by node id.
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, init=False, repr=False)
    #: Ports of nodes 2 and up (node 1's are the fields above), chosen by :meth:`launch`.
    _other_ports: dict[int, NodePorts] = field(default_factory=dict, init=False, repr=False)
    #: The ports :meth:`launch` chose (names of :class:`NodePorts` fields, by node id) and no start
    #: has bound yet: the ones :meth:`start` may choose again when another process took one first.
    _unbound_choices: dict[int, list[str]] = field(default_factory=dict, init=False, repr=False)
    #: Where each node's logs (stdout.log, server.log) ended when its JVM was last launched.
    _log_marks: dict[int, tuple[int, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise SandboxError(f"local cluster {self.name}: nodes must be 1 to {MAX_NODES}, not {self.nodes}")

    @property
    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def node_ports(self, node_id: int) -> NodePorts:
        self._check_node(node_id)
        if node_id == 1:
            return NodePorts(self.port, self.controller_port, self.sasl_port, self.ssl_port)
        return self._other_ports.setdefault(node_id, NodePorts())

    def _check_node(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise SandboxError(
                f"local cluster {self.name} has no node {node_id}: its node ids are 1 to {self.nodes}"
            )

    def _addresses(self, listener: str) -> list[str]:
        """``127.0.0.1:<port>`` of ``listener`` (a :class:`NodePorts` field) on every node."""
        return [f"127.0.0.1:{getattr(self.node_ports(node), listener)}" for node in self.node_ids]

    @property
    def bootstrap_servers(self) -> str:
        """The PLAINTEXT listener of every node, comma-separated."""
        return ",".join(self._addresses("port"))

    @property
    def sasl_bootstrap_servers(self) -> str:
        if not self.scram_users:
            raise SandboxError(f"local cluster {self.name} has no SASL listener (no scram_users)")
        return ",".join(self._addresses("sasl_port"))

    @property
    def ssl_bootstrap_servers(self) -> str:
        if not self.tls:
            raise SandboxError(f"local cluster {self.name} has no TLS listener (tls is off)")
        return ",".join(self._addresses("ssl_port"))

    @property
    def tls_ca_file(self) -> Path:
        """PEM of the TLS listener's self-signed certificate: the one CA a client needs to trust."""
        return self.work_dir / "tls" / "ca.pem"

    @property
    def _keystore(self) -> Path:
        return self.work_dir / "tls" / "broker.p12"

    def node_dir(self, node_id: int) -> Path:
        """The folder of one node: ``work_dir`` itself for a single node, else ``node-<id>`` in it."""
        self._check_node(node_id)
        return self.work_dir if self.nodes == 1 else self.work_dir / f"node-{node_id}"

    def node_data_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "data"

    @property
    def data_dir(self) -> Path:
        """Node 1's data folder (the only one of a single-node cluster)."""
        return self.node_data_dir(1)

    @property
    def server_log(self) -> Path:
        """Node 1's broker log."""
        return self.node_dir(1) / "server.log"

    def connection(self, **overrides: object) -> KafkaConnection:
        """How the tests and the sandbox itself reach the cluster: PLAINTEXT, or with an authorizer
        the super user over SCRAM (PLAINTEXT answers as ``User:ANONYMOUS``, which may do nothing)."""
        if self.super_user is None:
            return KafkaConnection.model_validate({"bootstrap_servers": self._addresses("port"), **overrides})
        return self.user_connection(self.super_user, **overrides)

    def user_connection(self, user: str, **overrides: object) -> KafkaConnection:
        """``user`` (one of ``scram_users``) over SCRAM-SHA-512 on the SASL listener."""
        if user not in self.scram_users:
            raise SandboxError(f"local cluster {self.name} has no SCRAM user {user!r}")
        security = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": user,
            "sasl_password": self.scram_users[user],
        }
        return KafkaConnection.model_validate(
            {"bootstrap_servers": self.sasl_bootstrap_servers.split(","), "security": security, **overrides}
        )

    def node_connection(self, *node_ids: int) -> KafkaConnection:
        """:meth:`connection` with only ``node_ids`` to bootstrap from (is that node answering?)."""
        listener = "port" if self.super_user is None else "sasl_port"
        addresses = self._addresses(listener)
        return self.connection().model_copy(
            update={"bootstrap_servers": [addresses[node_id - 1] for node_id in node_ids]}
        )

    def _ask(self, question: Callable[[Admin], Answer]) -> Answer:
        """``question`` asked of the nodes running now, by a new admin client each try.

        A client whose first metadata named a node just killed (and not yet fenced) as the
        controller keeps sending it requests; a new client a moment later learns a live one.
        """
        live = [node_id for node_id in self.node_ids if self.node_alive(node_id)]
        if not live:
            raise SandboxError(f"no node of local cluster {self.name} is running: start one first")

        def once() -> Answer:
            clients = KafkaClients(self.node_connection(*live))
            return question(Admin(clients, request_timeout=FINDER_REQUEST_SECS, retry_secs=0))

        return call_with_retries(once, within_secs=FINDER_RETRY_SECS, delay_secs=0.2, max_delay_secs=1.0)

    def _properties(self, node_id: int = 1) -> dict[str, str]:
        node = self.node_ports(node_id)
        # Client listeners by protocol (each listener is named after its protocol).
        ports = {"PLAINTEXT": node.port}
        props = dict(BASE_PROPERTIES)
        if self.nodes > 1:
            props.update(self._replication_properties(node_id))
        # First: it checks the super user is a SCRAM user, which the SASL listener's login needs.
        authorizer = self._authorizer_properties() if self.super_user is not None else {}
        controller_protocol = "SASL_PLAINTEXT" if authorizer else "PLAINTEXT"
        if self.scram_users:
            ports["SASL_PLAINTEXT"] = node.sasl_port
            props.update(self._sasl_properties())
        props.update(authorizer)
        if self.tls:
            ports["SSL"] = node.ssl_port
            props.update(self._tls_properties())
        client_listeners = [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
        voters = (f"{voter}@127.0.0.1:{self.node_ports(voter).controller_port}" for voter in self.node_ids)
        props.update(
            {
                "controller.quorum.voters": ",".join(voters),
                "listeners": ",".join([*client_listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
                "advertised.listeners": ",".join(client_listeners),
                "listener.security.protocol.map": ",".join(
                    [f"CONTROLLER:{controller_protocol}", *(f"{name}:{name}" for name in ports)]
                ),
                "log.dirs": str(self.node_data_dir(node_id)),
            }
        )
        props.update(self.extra_properties)
        return props

    def _replication_properties(self, node_id: int) -> dict[str, str]:
        """A cluster of several nodes replicated as in production: every topic (and the group,
        transaction and share coordinators' own topics) on up to three nodes, writes with acks=all
        needing two in sync, no unclean leader; one coordinator partition per node, so groups and
        transactional ids spread over the nodes."""
        replicas = str(min(REPLICATION_FACTOR, self.nodes))
        in_sync = str(min(MIN_IN_SYNC_REPLICAS, self.nodes))
        return {
            "node.id": str(node_id),
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": str(self.nodes),
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "transaction.state.log.num.partitions": str(self.nodes),
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": in_sync,
            "unclean.leader.election.enable": "false",
            "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": str(BROKER_SESSION_TIMEOUT_MS // 6),
        }

    def _sasl_properties(self) -> dict[str, str]:
        """The SASL_PLAINTEXT listener: SCRAM-SHA-256/512 and PLAIN, the same users for each."""
        props = {"sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS)}
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        # PLAIN checks passwords against the JAAS entries (user_<name>="<password>").
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = self._plain_jaas(self.scram_users)
        return props

    def _plain_jaas(self, users: dict[str, str]) -> str:
        """A PLAIN login: ``users`` it accepts and, with a super user, the one the broker logs in as."""
        login = (
            f' username="{self.super_user}" password="{self.scram_users[self.super_user]}"'
            if self.super_user is not None
            else ""
        )
        accepted = "".join(f' user_{user}="{password}"' for user, password in users.items())
        return f"org.apache.kafka.common.security.plain.PlainLoginModule required{login}{accepted};"

    def _authorizer_properties(self) -> dict[str, str]:
        """KRaft's ``StandardAuthorizer``, ``super_user`` its only super user.

        The broker's own traffic authenticates as the super user too, with PLAIN over SASL: to the
        controller (KRaft refuses SCRAM there, since SCRAM credentials live in the metadata log the
        controller serves) and between brokers (the SASL listener). ``User:ANONYMOUS`` is no super
        user: ``super.users`` is one list for every listener, so naming it would hand everything to
        whoever connects to the PLAINTEXT listener, which here holds no ACL and may do nothing.
        """
        user = self.super_user
        if user is None or user not in self.scram_users:
            raise SandboxError(
                f"super user {user!r} of local cluster {self.name} is not one of its SCRAM users"
            )
        return {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{user}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": self._plain_jaas(
                {user: self.scram_users[user]}
            ),
        }

    def _tls_properties(self) -> dict[str, str]:
        return {
            "listener.name.ssl.ssl.keystore.location": str(self._keystore),
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.password": _KEYSTORE_PASSWORD,
            "listener.name.ssl.ssl.key.password": _KEYSTORE_PASSWORD,
        }

    def make_certificate(self) -> None:
        """A self-signed key and certificate for 127.0.0.1 (keytool, once), and its PEM for clients."""
        if self._keystore.exists() and self.tls_ca_file.exists():
            return
        self._keystore.parent.mkdir(parents=True, exist_ok=True)
        self._keystore.unlink(missing_ok=True)
        store = ["-keystore", str(self._keystore), "-storetype", "PKCS12", "-storepass", _KEYSTORE_PASSWORD]
        steps = [
            ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "30",
             "-dname", f"CN=kafka-backup sandbox {self.name}", "-ext", "SAN=IP:127.0.0.1,DNS:localhost",
             "-keypass", _KEYSTORE_PASSWORD, *store],
            ["-exportcert", "-rfc", "-alias", "broker", "-file", str(self.tls_ca_file), *store],
        ]  # fmt: skip
        for step in steps:
            result = subprocess.run(["keytool", *step], capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SandboxError(
                    f"making the TLS certificate of local cluster {self.name} failed "
                    f"(keytool {step[0]}):\n{(result.stdout + result.stderr)[-2000:]}"
                )

    def _scram_format_arguments(self) -> list[str]:
        """``--add-scram`` arguments: every user under both mechanisms (KRaft stores them in metadata)."""
        arguments: list[str] = []
        for user, password in self.scram_users.items():
            if not user.isidentifier() or any(char in password for char in '",[]='):
                raise SandboxError(f'SCRAM user {user!r}: use a plain name and a password without ",[]=')
            for mechanism in SCRAM_MECHANISMS:
                arguments += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return arguments

    def _write_config(self, node_id: int = 1) -> Path:
        folder = self.node_dir(node_id)
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self._properties(node_id).items()))
        (folder / "log4j2.properties").write_text(
            LOG4J2_PROPERTIES.format(log_file=folder / "server.log", level="INFO")
        )
        return config

    def _java(self, *args: str, node_id: int = 1) -> list[str]:
        folder = self.node_dir(node_id)
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={folder}",
            "-cp",
            classpath(self.libs),
            *args,
        ]

    def format_storage(self, node_id: int = 1) -> None:
        """Format a node's data folder once (KRaft needs it before the first start); every node of a
        cluster is formatted with the cluster's id (and its SCRAM users)."""
        if (self.node_data_dir(node_id) / "meta.properties").exists():
            return
        config = self._write_config(node_id)
        result = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(config),
                *self._scram_format_arguments(),
                node_id=node_id,
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise SandboxError(
                f"formatting the storage of local cluster {self.name} (node {node_id}) failed:\n"
                f"{result.stderr[-2000:]}"
            )

    def _choose_ports(self) -> None:
        """Free ports for every node not given any (all chosen before the first node starts: each
        node's properties name every voter)."""
        for node_id in self.node_ids:
            ports = self.node_ports(node_id)
            wanted = ["port", "controller_port"]
            wanted += ["sasl_port"] if self.scram_users else []
            wanted += ["ssl_port"] if self.tls else []
            for name in wanted:
                if not getattr(ports, name):
                    setattr(ports, name, free_port())
                    self._unbound_choices.setdefault(node_id, []).append(name)
            if node_id == 1:
                self.port, self.controller_port = ports.port, ports.controller_port
                self.sasl_port, self.ssl_port = ports.sasl_port, ports.ssl_port

    def launch(self) -> None:
        """Start every node's JVM without waiting for it to be ready (see :meth:`wait_ready`)."""
        self._choose_ports()
        if self.tls:
            self.make_certificate()  # one certificate for 127.0.0.1, shared by every node
        for node_id in self.node_ids:
            self.launch_node(node_id)

    def launch_node(self, node_id: int) -> None:
        """Start one node's JVM (same ports, properties and data as before) without waiting."""
        if self.node_alive(node_id):
            return
        self._write_config(node_id)
        self.format_storage(node_id)
        folder = self.node_dir(node_id)
        self._log_marks[node_id] = (_size(folder / "stdout.log"), _size(folder / "server.log"))
        stdout = (folder / "stdout.log").open("ab")
        self.processes[node_id] = subprocess.Popen(
            self._java("kafka.Kafka", str(folder / "server.properties"), node_id=node_id),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            cwd=folder,
        )
        stdout.close()

    def node_alive(self, node_id: int) -> bool:
        """Whether the node's JVM runs (started and not exited, killed or stopped)."""
        self._check_node(node_id)
        process = self.processes.get(node_id)
        return process is not None and process.poll() is None

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until every node answers a metadata request and, with several nodes, the metadata
        lists them all as brokers (so topics replicated on every node can be created); raise with
        the log tail if a JVM died."""
        deadline = time.monotonic() + timeout
        for node_id in self.node_ids:
            self._wait_node_answers(node_id, deadline, timeout)
        if self.nodes > 1:
            self._wait_brokers(set(self.node_ids), deadline, timeout)

    def _wait_node_answers(self, node_id: int, deadline: float, timeout: float) -> None:
        connection = self.connection() if self.nodes == 1 else self.node_connection(node_id)
        what = f"local Kafka cluster {self.name}" + (f" (node {node_id})" if self.nodes > 1 else "")
        answered = wait_until_answering(
            connection,
            timeout_secs=max(deadline - time.monotonic(), 0.1),
            alive=lambda: self.node_alive(node_id),
        )
        if answered:
            return
        if not self.node_alive(node_id):
            raise SandboxError(f"{what} exited during start-up:\n{self.log_tail(node_id=node_id)}")
        raise SandboxError(f"{what} did not answer within {timeout:g}s:\n{self.log_tail(node_id=node_id)}")

    def _wait_brokers(self, wanted: set[int], deadline: float, timeout: float) -> None:
        """Until the metadata lists every node in ``wanted`` as a broker (registered and unfenced)."""
        admin = open_admin(self.connection())
        listed = call_with_retries(
            lambda: set(admin.metadata().brokers),
            within_secs=max(deadline - time.monotonic(), 0.1),
            delay_secs=0.2,
            max_delay_secs=1.0,
            until=lambda brokers: wanted <= brokers,
        )
        if not wanted <= listed:
            missing = ", ".join(map(str, sorted(wanted - listed)))
            raise SandboxError(
                f"local Kafka cluster {self.name}: node(s) {missing} not listed as brokers within "
                f"{timeout:g}s (listed: {sorted(listed)}); see their server.log under {self.work_dir}"
            )

    def start(self, timeout: float = 90.0) -> LocalKafkaCluster:
        self.launch()
        self.wait_ready_choosing_again(timeout)
        return self

    def wait_ready_choosing_again(self, timeout: float = 90.0) -> None:
        """:meth:`wait_ready`; but when a node exits because a port :meth:`launch` chose was taken
        by another process before the JVM bound it, stop, choose those ports again and launch
        again (up to PORT_ATTEMPTS launches). Ports once bound are kept: restarts reuse them."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self.wait_ready(timeout)
            except SandboxError as error:
                if not self._lost_a_port():
                    raise
                if attempt == PORT_ATTEMPTS or not self._unbound_choices:
                    raise SandboxError(
                        f"local Kafka cluster {self.name}: a port of one of its nodes was taken by another "
                        f"process ({PORT_TAKEN}) after {attempt} launch(es)\n{error}"
                    ) from None
                self.stop()
                self._forget_unbound_choices()
                self.launch()
            else:
                self._unbound_choices.clear()
                return

    def _lost_a_port(self) -> bool:
        """Whether a node's log since its launch says a port was taken (anywhere in it: a JVM that
        fails to bind logs its configuration again as it stops, so the error is not at the end)."""
        for node_id, marks in self._log_marks.items():
            folder = self.node_dir(node_id)
            for path, mark in zip((folder / "stdout.log", folder / "server.log"), marks, strict=True):
                with contextlib.suppress(OSError), path.open("rb") as handle:
                    handle.seek(mark)
                    if PORT_TAKEN.encode() in handle.read():
                        return True
        return False

    def _forget_unbound_choices(self) -> None:
        for node_id, names in self._unbound_choices.items():
            ports = self.node_ports(node_id)
            for name in names:
                setattr(ports, name, 0)
            if node_id == 1:
                self.port, self.controller_port = ports.port, ports.controller_port
                self.sasl_port, self.ssl_port = ports.sasl_port, ports.ssl_port
        self._unbound_choices.clear()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to every node at once (a clean shutdown), then SIGKILL to any not exited in time."""
        processes = [self.processes.pop(node_id) for node_id in sorted(self.processes)]
        running = [process for process in processes if process.poll() is None]
        # All at once: nodes stopped one after another would each wait for a shrinking quorum.
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def kill(self) -> None:
        """SIGKILL every node: a crash, for fault tests."""
        for node_id in list(self.processes):
            self.kill_node(node_id)

    def restart(self, timeout: float = 90.0) -> None:
        """Stop and start again on the same ports and data (the cluster keeps its id and records)."""
        self.stop()
        self.start(timeout)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: a crash. The controller fences it after BROKER_SESSION_TIMEOUT_MS."""
        self._check_node(node_id)
        process = self.processes.pop(node_id, None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        """SIGTERM one node: a controlled shutdown (its leaderships move, it leaves every ISR)."""
        self._check_node(node_id)
        stop_process(self.processes.pop(node_id, None), timeout)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Start one node again on its ports and data, and wait until it answers and the metadata
        lists it as a broker. Its replicas then catch up: see :meth:`in_sync_replicas`."""
        self.launch_node(node_id)
        deadline = time.monotonic() + timeout
        self._wait_node_answers(node_id, deadline, timeout)
        if self.nodes > 1:
            self._wait_brokers({node_id}, deadline, timeout)

    def restart_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Stop one node cleanly and start it again on the same ports and data."""
        self.stop_node(node_id)
        self.start_node(node_id, timeout)

    # -- where things live ------------------------------------------------------------------------

    def partitions_of(self, topic: str) -> dict[int, PartitionReplicas]:
        """Each partition of ``topic``: leader, replicas and in-sync replicas by node id, now."""
        return self._ask(lambda admin: admin.partition_replicas(topic))

    def _partition(self, topic: str, partition: int) -> PartitionReplicas:
        found = self.partitions_of(topic)
        if partition not in found:
            raise SandboxError(
                f"topic {topic} of local cluster {self.name} has no partition {partition} "
                f"(it has {len(found)}); name one of 0 to {len(found) - 1}"
            )
        return found[partition]

    def partition_leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``/``partition`` now; SandboxError when it has no leader."""
        leader = self._partition(topic, partition).leader
        if leader is None:
            raise SandboxError(
                f"{topic}/{partition} on local cluster {self.name} has no leader now: start one of "
                "its replicas again"
            )
        return leader

    def in_sync_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """The node ids in the ISR of ``topic``/``partition`` now, sorted."""
        return self._partition(topic, partition).in_sync

    def group_coordinator(self, group_id: str) -> int:
        """The node id coordinating the consumer group ``group_id`` now (Kafka's FindCoordinator)."""
        return self._ask(lambda admin: admin.group_coordinator(group_id))

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node id coordinating ``transactional_id`` now.

        confluent-kafka has no request that names a transaction coordinator, so this is where Kafka
        puts it: the leader of the ``__transaction_state`` partition that holds the id
        (:func:`coordinator_partition`). That topic exists once a transactional producer has
        initialised on the cluster.
        """
        counts = self._ask(lambda admin: admin.metadata().partition_counts())
        partitions = counts.get(TRANSACTION_STATE_TOPIC)
        if partitions is None:
            raise SandboxError(
                f"local cluster {self.name} has no {TRANSACTION_STATE_TOPIC} topic yet: initialise a "
                "transactional producer on it first"
            )
        return self.partition_leader(
            TRANSACTION_STATE_TOPIC, coordinator_partition(transactional_id, partitions)
        )

    def active_controller(self) -> int:
        """The node id of the active controller (the quorum's leader) now.

        Read from each running node's ``quorum-state`` file, which a voter rewrites whenever it
        learns of a new leader: the leader of the highest epoch any of them knows. SandboxError
        while that leader is down and no new one is elected yet: ask again.
        """
        known: list[tuple[int, int]] = []
        for node_id in self.node_ids:
            state = self.node_data_dir(node_id) / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError):
                if self.node_alive(node_id):
                    found = json.loads(state.read_text())
                    known.append((int(found["leaderEpoch"]), int(found["leaderId"])))
        epoch, leader = max(known, default=(-1, -1))
        if leader not in self.node_ids or not self.node_alive(leader):
            raise SandboxError(
                f"local cluster {self.name} has no active controller now (last known: node {leader}, "
                f"epoch {epoch}): ask again once the quorum has elected one"
            )
        return leader

    def log_tail(self, lines: int = 25, *, node_id: int = 1) -> str:
        folder = self.node_dir(node_id)
        return log_tails([folder / "stdout.log", folder / "server.log"], lines)


@contextlib.contextmanager
def local_clusters(
    names: Sequence[str],
    base_dir: Path | None = None,
    *,
    extra_properties: dict[str, str] | None = None,
    keep_data: bool = False,
    timeout: float = 90.0,
    scram_users: Mapping[str, Mapping[str, str]] | None = None,
    super_user: str | None = None,
    nodes: int = 1,
) -> Iterator[list[LocalKafkaCluster]]:
    """Start one cluster of ``nodes`` nodes per name (all JVMs launched first, then awaited) and
    stop them all on exit.

    ``scram_users`` gives a cluster, by its name, its SCRAM users (name -> password; see
    :attr:`LocalKafkaCluster.scram_users`); ``super_user``, one of every cluster's users, starts each
    with the authorizer (:attr:`LocalKafkaCluster.super_user`)."""
    libs = kafka_libs()
    owned_dir = base_dir is None
    root = Path(tempfile.mkdtemp(prefix="kbackup-sandbox-")) if base_dir is None else base_dir
    clusters = [
        LocalKafkaCluster(
            name=name,
            work_dir=root / name,
            libs=libs,
            extra_properties=dict(extra_properties or {}),
            scram_users=dict((scram_users or {}).get(name, {})),
            super_user=super_user,
            nodes=nodes,
        )
        for name in names
    ]
    try:
        for cluster in clusters:
            cluster.launch()
        for cluster in clusters:
            cluster.wait_ready_choosing_again(timeout)
        yield clusters
    finally:
        for cluster in clusters:
            cluster.stop()
        if owned_dir and not keep_data:
            shutil.rmtree(root, ignore_errors=True)
