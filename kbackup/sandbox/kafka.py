"""Throwaway single-node Apache Kafka clusters (KRaft) on loopback, for tests, the demo and benchmarks.

Each cluster is a real broker+controller JVM started from the jars that
:mod:`kbackup.sandbox.jars` resolves, with its own ports, data folder and
cluster id. Nothing here is a mock: the tests and the disaster-recovery drill
talk to these brokers exactly as they would to a production cluster.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.kafka import wait_until_answering
from kbackup.sandbox.jars import classpath, kafka_libs


class SandboxError(KBackupError):
    """A local cluster could not be formatted, started or stopped."""

    exit_code = 1
    kind = "sandbox"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


@dataclass
class LocalKafkaCluster:
    """One single-node KRaft cluster: a broker and controller in one JVM."""

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
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        if not self.scram_users:
            raise SandboxError(f"local cluster {self.name} has no SASL listener (no scram_users)")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        if not self.tls:
            raise SandboxError(f"local cluster {self.name} has no TLS listener (tls is off)")
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def tls_ca_file(self) -> Path:
        """PEM of the TLS listener's self-signed certificate: the one CA a client needs to trust."""
        return self.work_dir / "tls" / "ca.pem"

    @property
    def _keystore(self) -> Path:
        return self.work_dir / "tls" / "broker.p12"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def server_log(self) -> Path:
        return self.work_dir / "server.log"

    def connection(self, **overrides: object) -> KafkaConnection:
        """How the tests and the sandbox itself reach the cluster: PLAINTEXT, or with an authorizer
        the super user over SCRAM (PLAINTEXT answers as ``User:ANONYMOUS``, which may do nothing)."""
        if self.super_user is None:
            return KafkaConnection.model_validate(
                {"bootstrap_servers": [self.bootstrap_servers], **overrides}
            )
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
            {"bootstrap_servers": [self.sasl_bootstrap_servers], "security": security, **overrides}
        )

    def _properties(self) -> dict[str, str]:
        # Client listeners by protocol (each listener is named after its protocol).
        ports = {"PLAINTEXT": self.port}
        props = dict(BASE_PROPERTIES)
        # First: it checks the super user is a SCRAM user, which the SASL listener's login needs.
        authorizer = self._authorizer_properties() if self.super_user is not None else {}
        controller_protocol = "SASL_PLAINTEXT" if authorizer else "PLAINTEXT"
        if self.scram_users:
            ports["SASL_PLAINTEXT"] = self.sasl_port
            props.update(self._sasl_properties())
        props.update(authorizer)
        if self.tls:
            ports["SSL"] = self.ssl_port
            props.update(self._tls_properties())
        client_listeners = [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
        props.update(
            {
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
                "listeners": ",".join([*client_listeners, f"CONTROLLER://127.0.0.1:{self.controller_port}"]),
                "advertised.listeners": ",".join(client_listeners),
                "listener.security.protocol.map": ",".join(
                    [f"CONTROLLER:{controller_protocol}", *(f"{name}:{name}" for name in ports)]
                ),
                "log.dirs": str(self.data_dir),
            }
        )
        props.update(self.extra_properties)
        return props

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

    def _write_config(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self._properties().items()))
        (self.work_dir / "log4j2.properties").write_text(
            LOG4J2_PROPERTIES.format(log_file=self.server_log, level="INFO")
        )
        return config

    def _java(self, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.work_dir}",
            "-cp",
            classpath(self.libs),
            *args,
        ]

    def format_storage(self) -> None:
        """Format the data folder once (KRaft needs it before the first start)."""
        if (self.data_dir / "meta.properties").exists():
            return
        config = self._write_config()
        result = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(config),
                *self._scram_format_arguments(),
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise SandboxError(
                f"formatting the storage of local cluster {self.name} failed:\n{result.stderr[-2000:]}"
            )

    def launch(self) -> None:
        """Start the JVM without waiting for it to be ready (see :meth:`wait_ready`)."""
        if self.process is not None and self.process.poll() is None:
            return
        if not self.port:
            self.port, self.controller_port = free_port(), free_port()
        if self.scram_users and not self.sasl_port:
            self.sasl_port = free_port()
        if self.tls:
            self.ssl_port = self.ssl_port or free_port()
            self.make_certificate()
        self._write_config()
        self.format_storage()
        stdout = (self.work_dir / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(self.work_dir / "server.properties")),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            cwd=self.work_dir,
        )
        stdout.close()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until a metadata request answers with a broker; raise with the log tail if the JVM died."""

        def alive() -> bool:
            return self.process is not None and self.process.poll() is None

        if not wait_until_answering(self.connection(), timeout_secs=timeout, alive=alive):
            if not alive():
                raise SandboxError(
                    f"local Kafka cluster {self.name} exited during start-up:\n{self.log_tail()}",
                )
            raise SandboxError(
                f"local Kafka cluster {self.name} did not answer within {timeout:g}s:\n{self.log_tail()}"
            )

    def start(self, timeout: float = 90.0) -> LocalKafkaCluster:
        self.launch()
        self.wait_ready(timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not exit in time."""
        process, self.process = self.process, None
        stop_process(process, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def restart(self, timeout: float = 90.0) -> None:
        """Stop and start again on the same ports and data (the cluster keeps its id and records)."""
        self.stop()
        self.start(timeout)

    def log_tail(self, lines: int = 25) -> str:
        return log_tails([self.work_dir / "stdout.log", self.server_log], lines)


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
) -> Iterator[list[LocalKafkaCluster]]:
    """Start one cluster per name (all JVMs launched first, then awaited) and stop them all on exit.

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
        )
        for name in names
    ]
    try:
        for cluster in clusters:
            cluster.launch()
        for cluster in clusters:
            cluster.wait_ready(timeout)
        yield clusters
    finally:
        for cluster in clusters:
            cluster.stop()
        if owned_dir and not keep_data:
            shutil.rmtree(root, ignore_errors=True)
