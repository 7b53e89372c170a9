"""``check``: every part of a config, each judged on its own, offline first.

A part is a cluster (``source``, ``target``), the ``storage``, the ``spark`` settings, or a rule
across sections. Offline, each part is checked without a connection to Kafka, the storage or
Spark: librdkafka validates the client properties without a broker, files named by the config are
looked at, and rules that would otherwise fail late (at plan time, after a restore) are applied.
Online, each part that passed offline is then reached. Every part is tried whatever another one
found, so one run names every problem; the first failure decides the exit code.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kbackup.app.config import KBackupConfig
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaUnreachableError, KBackupError, UsageError
from kbackup.core.kafka import check_client_properties, open_admin
from kbackup.core.kafka.clients import check_producer_properties, unreachable_reason
from kbackup.format.record_match import RecordMatcher
from kbackup.mapping.settings import MappingSettings
from kbackup.mapping.spark_kafka import spark_kafka_options
from kbackup.restore.settings import RESTORE_PRODUCER_KEYS
from kbackup.storage import open_key, open_storage

#: How long ``check`` waits for each storage request and for a Spark master: a preflight answers
#: in seconds, where a run retries a failing request for storage.retry_timeout_secs.
CHECK_TIMEOUT_SECS = 5.0

#: The modes whose commands start Spark for the offset mapping by default (three_phase.build_mapping).
_MAPPING_MODES = ("three-phase-restore", "drill")


@dataclass(frozen=True)
class PartResult:
    """What ``check`` found for one part of the config."""

    #: ``source``, ``target``, ``cluster`` (``--bootstrap-servers``), ``storage``, ``spark``, or the
    #: section a rule across sections belongs to (``offset_reset``).
    role: str
    #: What was checked, safe to print (servers, the storage URL, the Spark master).
    subject: str
    #: What was found when it passed.
    found: str = ""
    error: KBackupError | None = None
    #: What was found, as ``--json`` gives it under the role (a cluster's id and counts, the
    #: storage's objects): the fields ``check --json`` has always had.
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"role": self.role, "subject": self.subject, "ok": self.ok}
        if self.error is None:
            result["found"] = self.found
            result.update(self.facts)
        else:
            result["error"] = {
                "kind": self.error.kind,
                "message": self.error.message,
                "hint": self.error.hint,
                "exit_code": self.error.exit_code,
            }
        return result


@dataclass(frozen=True)
class Cluster:
    role: str
    connection: KafkaConnection


def clusters_of(config: KBackupConfig, flag_cluster: KafkaConnection | None) -> list[Cluster]:
    """The clusters ``check`` reaches: the one ``--bootstrap-servers`` names instead of the
    config's, else the config's source and target."""
    if flag_cluster is not None:
        return [Cluster("cluster", flag_cluster)]
    return [
        Cluster(role, connection)
        for role, connection in (("source", config.source), ("target", config.target))
        if connection is not None
    ]


def flag_cluster_base(config: KBackupConfig) -> KafkaConnection | None:
    """The section whose security settings a ``--bootstrap-servers`` cluster is reached with: the
    source, else the target (like a Kafka tool's ``--command-config``)."""
    base = config.source or config.target
    if base is None:
        return None
    # The connection only: a source section's topic selection is no part of reaching a cluster.
    return KafkaConnection.model_validate(base.model_dump(include=set(KafkaConnection.model_fields)))


def check_config(config: KBackupConfig, clusters: list[Cluster], *, offline: bool) -> list[PartResult]:
    """Every part of ``config``, each tried whatever the others found; ``offline``: no connection
    to Kafka, the storage or Spark is opened."""
    if not clusters and not offline:
        raise UsageError(
            "nothing to check: give --config with a source or target section, or --bootstrap-servers"
        )
    results = [_cluster(cluster, offline=offline) for cluster in clusters]
    results.append(_storage(config, offline=offline))
    if spark_in_use(config):
        results.append(_spark(config, offline=offline))
    results += [PartResult(role, "rule", error=error) for role, error in cross_section_problems(config)]
    return results


def first_failure(results: list[PartResult]) -> KBackupError | None:
    return next((result.error for result in results if result.error is not None), None)


# -- the parts -------------------------------------------------------------------------------------


def _attempt(
    role: str, subject: str, work: Callable[[], str], facts: dict[str, Any] | None = None
) -> PartResult:
    try:
        return PartResult(role, subject, found=work(), facts=facts if facts is not None else {})
    except KBackupError as error:
        return PartResult(role, subject, error=error)


def _cluster(cluster: Cluster, *, offline: bool) -> PartResult:
    connection = cluster.connection

    def work() -> str:
        # Files and properties first: a typo fails here, before any network call.
        check_client_properties(connection, where=cluster.role)
        if offline:
            return "settings valid (not reached: --offline)"
        info = open_admin(connection).metadata()
        facts.update(
            bootstrap_servers=connection.bootstrap_servers,
            cluster_id=info.cluster_id,
            brokers=len(info.brokers),
            topics=len(info.topics),
        )
        return f"cluster id {info.cluster_id}, {len(info.brokers)} broker(s), {len(info.topics)} topic(s)"

    facts: dict[str, Any] = {}
    result = _attempt(cluster.role, ",".join(connection.bootstrap_servers), work, facts)
    error = result.error
    if error is not None and not error.message.startswith(f"{cluster.role}."):
        # A broker's answer names the servers, not which cluster of the config they are.
        named = copy.copy(error)
        named.message = f"{cluster.role}: {error.message}"
        named.args = (named.message,)
        if error.hint is not None:
            key = "--bootstrap-servers" if cluster.role == "cluster" else f"{cluster.role}.bootstrap_servers"
            named.hint = error.hint.replace("bootstrap_servers", key)
        return PartResult(result.role, result.subject, error=named)
    return result


def _storage(config: KBackupConfig, *, offline: bool) -> PartResult:
    settings = config.storage

    def work() -> str:
        url = settings.resolved_url()
        encryption = settings.encryption
        if offline:
            parsed = urlparse(url)
            if parsed.scheme == "s3" and not parsed.netloc:
                raise ConfigError(f"storage url {url!r}: expected s3://bucket[/prefix]")
            # A key file or variable is read here; a KMS key is asked only when a backup is opened.
            if encryption is not None and not encryption.kms_key_id:
                open_key(encryption, settings)
            return "settings valid (not reached: --offline)"
        storage = open_storage(settings, check_timeout_secs=CHECK_TIMEOUT_SECS)
        exists = storage.location_exists()
        objects = sum(1 for _ in storage.list("")) if exists else 0
        facts.update(url=storage.url, exists=exists, objects=objects)
        if not exists:
            return "no such folder yet (a backup creates it), 0 object(s)"
        return f"reachable, {objects} object(s)"

    try:
        subject = settings.resolved_url()
    except KBackupError as error:
        return PartResult("storage", "(storage section)", error=error)
    facts: dict[str, Any] = {}
    return _attempt("storage", subject, work, facts)


def spark_in_use(config: KBackupConfig) -> bool:
    """Whether the config's commands start Spark: the Spark engine, a mode that builds the offset
    mapping, or a ``mapping`` section written in the file."""
    # Compared with the defaults: loading marks every section as set (its paths are anchored).
    written = config.mapping != MappingSettings()
    return config.engine == "spark" or config.mode in _MAPPING_MODES or written


def _spark(config: KBackupConfig, *, offline: bool) -> PartResult:
    mapping = config.mapping

    def work() -> str:
        for jar in mapping.spark_jars:
            if not Path(jar).is_file():
                raise ConfigError(
                    f"mapping.spark_jars: {jar}: no such file",
                    hint="give the jar files' paths (relative: to the config file's folder), or leave "
                    "spark_jars empty to resolve Spark's Kafka source from Maven",
                )
        if config.target is not None:
            # The mapping job reads the target with Java's client: its settings translated now.
            spark_kafka_options(config.target, mapping.kafka_options)
        if offline:
            return "settings valid (not reached: --offline)"
        return _reach_master(mapping.spark_master)

    return _attempt("spark", mapping.spark_master, work)


def _reach_master(master: str) -> str:
    """A standalone master (``spark://host:port[,host:port]``) accepts a TCP connection; other
    masters are checked when a job starts."""
    parsed = urlparse(master)
    if parsed.scheme != "spark":
        return "settings valid (a local, YARN or Kubernetes master is reached when a job starts)"
    servers = parsed.netloc.split(",")
    found = unreachable_reason(servers, CHECK_TIMEOUT_SECS)
    if found is not None:
        reason, hint = found
        raise KafkaUnreachableError(
            f"Spark master {master}: {reason}", hint=hint.replace("bootstrap_servers", "mapping.spark_master")
        )
    return "the master accepts connections"


# -- rules across sections -------------------------------------------------------------------------


def cross_section_problems(config: KBackupConfig) -> list[tuple[str, ConfigError]]:
    """Rules that span sections (each section's own rules are checked when the file is read), or
    that a command would otherwise apply only late: at plan time, or after a restore phase."""
    problems: list[tuple[str, ConfigError]] = []
    reset = config.offset_reset
    if reset.source_offsets == "live" and config.source is None:
        problems.append(
            (
                "offset_reset",
                ConfigError(
                    "offset_reset.source_offsets: live reads the groups' offsets from the source "
                    "cluster, and there is no 'source' section",
                    hint="add a source section, or use source_offsets: backup",
                ),
            )
        )
    if config.engine == "spark" and config.backup.continuous:
        problems.append(
            (
                "backup",
                ConfigError(
                    "backup.continuous: true runs on the local engine only, and engine is spark "
                    "(engine: spark copies one increment per run)",
                    hint="schedule the Spark backup (each run commits an increment), or use engine: local",
                ),
            )
        )
    reserved = sorted(RESTORE_PRODUCER_KEYS & set(config.restore.producer_properties))
    if reserved:
        problems.append(
            (
                "restore",
                ConfigError(
                    f"restore.producer_properties: {', '.join(reserved)} is set by the restore itself "
                    "(exactly once needs it)",
                    hint="remove it from restore.producer_properties",
                ),
            )
        )
    elif config.restore.producer_properties:
        try:
            check_producer_properties(config.restore.producer_properties, where="restore.producer_properties")
        except ConfigError as error:
            problems.append(("restore", error))
    problems += [(section, error) for section, error in _mode_problems(config)]
    if "users" in config.restore_metadata.kinds and config.restore_metadata.password_source():
        try:
            # Read and parsed (never printed): a missing file or a broken one is found before a
            # recovery reaches its metadata phase.
            config.restore_metadata.load_passwords()
        except ConfigError as error:
            problems.append(("restore_metadata", error))
    problems += _keys_file_problems(config)
    metrics_file = config.metrics.textfile
    if metrics_file and not Path(metrics_file).parent.is_dir():
        problems.append(
            (
                "metrics",
                ConfigError(
                    f"metrics.textfile: {metrics_file}: no such folder {Path(metrics_file).parent}",
                    hint="name a file in an existing folder (node-exporter's --collector.textfile.directory)",
                ),
            )
        )
    scratch = config.backup.scratch_dir
    if scratch and not Path(scratch).is_dir():
        problems.append(
            ("backup", ConfigError(f"backup.scratch_dir: {scratch}: no such folder", hint="create it first"))
        )
    return problems


def _keys_file_problems(config: KBackupConfig) -> list[tuple[str, ConfigError]]:
    """The keys files of ``restore.filters``, read and parsed (never printed): a missing or broken
    one is found before a restore after an erasure request is started."""
    problems: list[tuple[str, ConfigError]] = []
    for rule in config.restore.filters:
        if rule.keys_file is None:
            continue
        try:
            RecordMatcher.from_settings(rule)
        except ConfigError as error:
            problems.append(("restore", error))
    return problems


def _mode_problems(config: KBackupConfig) -> list[tuple[str, ConfigError]]:
    """What the command the file says it is for (``mode``) refuses, found before that command
    restores anything."""
    problems: list[tuple[str, ConfigError]] = []
    if config.mode not in ("three-phase-restore", "drill"):
        return problems
    headers = config.restore.include_original_offset_header
    why = None
    if headers is False:
        why = "restore.include_original_offset_header is false"
    elif headers is None and config.mode == "drill" and not config.backup.include_offset_headers:
        # The drill restores the backup it takes with this file's backup section.
        why = "backup.include_offset_headers is false and restore.include_original_offset_header is unset"
    if why is not None:
        problems.append(
            (
                "restore",
                ConfigError(
                    f"mode: {config.mode} needs x-kafka-backup-* origin headers on the restored "
                    f"records, but {why}",
                    hint="set restore.include_original_offset_header: true",
                ),
            )
        )
    if config.mode == "drill":
        missing = [name for name in ("source", "target") if getattr(config, name) is None]
        if missing:
            problems.append(
                (
                    "drill",
                    ConfigError(
                        f"mode: drill needs 'source' and 'target' sections; missing: {', '.join(missing)}"
                    ),
                )
            )
    return problems
