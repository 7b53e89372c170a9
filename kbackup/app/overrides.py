"""Command-line flags over the config file, in one place.

Every command that takes a config file and flags builds its inputs here: the file's section with
the flags put over it, then validated as the config loader validates (a bad value is one
``ConfigError`` naming the flag; secrets are registered for redaction). A flag replaces only what
it names: ``--bootstrap-servers`` keeps the connection's security settings, properties and
timeout; ``--path`` keeps the storage's S3 endpoint, region, credentials and server-side
encryption. The stages receive the finished settings, never the whole config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from kbackup.app.config import KBackupConfig
from kbackup.backup.runner import BackupJob
from kbackup.backup.settings import SourceSettings
from kbackup.core.config import KafkaConnection, StorageSettings, encryption_from_spec, validate_config
from kbackup.core.errors import UsageError
from kbackup.core.metrics import MetricsSettings
from kbackup.core.spark import SparkEngine, engine_master
from kbackup.mapping.settings import MappingSettings
from kbackup.mapping.spark_session import spark_conf as mapping_spark_conf
from kbackup.restore.settings import RestoreSettings

Connection = TypeVar("Connection", bound=KafkaConnection)
Settings = TypeVar("Settings", bound=BaseModel)

BOOTSTRAP_FLAG = "--bootstrap-servers"


def _over(base: Settings, updates: dict[str, Any], model: type[Settings], source: str) -> Settings:
    """``base`` with ``updates`` put over it, validated like a config file section."""
    if not updates:
        return base
    return validate_config({**base.model_dump(), **updates}, model, source)


def with_bootstrap_servers(
    base: Connection | None, bootstrap_servers: str | None, model: type[Connection]
) -> Connection | None:
    """The config's connection with ``--bootstrap-servers`` replacing only its servers.

    Without a section in the file, the flag alone makes a plaintext connection.
    """
    if not bootstrap_servers:
        return base
    data: dict[str, Any] = base.model_dump() if base is not None else {}
    data["bootstrap_servers"] = bootstrap_servers
    return validate_config(data, model, BOOTSTRAP_FLAG)


def target_connection(config: KBackupConfig, bootstrap_servers: str | None) -> KafkaConnection:
    """The cluster groups move on: the config's ``target`` with ``--bootstrap-servers`` over it."""
    connection = with_bootstrap_servers(config.target, bootstrap_servers, KafkaConnection)
    if connection is None:
        raise UsageError("give --bootstrap-servers (or a config file with a 'target' section)")
    return connection


def storage_settings(config: KBackupConfig, path: str | None) -> StorageSettings:
    """The config's storage section, with ``--path`` replacing only its location."""
    if path is None:
        return config.storage
    data = config.storage.model_dump(exclude={"url", "backend", "path", "bucket", "prefix"})
    data["url"] = path
    return validate_config(data, StorageSettings, "--path")


def backup_id_of(config: KBackupConfig, backup_id: str | None) -> str:
    chosen = backup_id or config.backup_id
    if not chosen:
        raise UsageError("no backup id: give --backup-id or set backup_id in the config file")
    return chosen


def backup_job(
    config: KBackupConfig,
    *,
    bootstrap_servers: str | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    path: str | None = None,
    backup_id: str | None = None,
    source_cluster_id: str | None = None,
    follow: bool = False,
) -> BackupJob:
    """What one ``backup`` run needs: the file's source, storage and backup sections, flags over them."""
    source = with_bootstrap_servers(config.source, bootstrap_servers, SourceSettings)
    if source is None:
        raise UsageError("no source cluster: give --bootstrap-servers or a config file with a source section")
    topics: dict[str, Any] = {}
    if include:
        topics["include"] = include
    if exclude:
        topics["exclude"] = exclude
    if topics:
        source = validate_config(
            {**source.model_dump(), "topics": {**source.topics.model_dump(), **topics}},
            SourceSettings,
            "--include/--exclude",
        )
    updates: dict[str, Any] = {}
    if source_cluster_id:
        updates["source_cluster_id"] = source_cluster_id
    if follow:
        updates["continuous"] = True
    return BackupJob(
        backup_id=backup_id_of(config, backup_id),
        source=source,
        storage=storage_settings(config, path),
        settings=_over(config.backup, updates, type(config.backup), "command line"),
    )


def metrics_settings(
    config: KBackupConfig,
    *,
    port: int | None = None,
    bind_address: str | None = None,
    textfile: str | None = None,
) -> MetricsSettings:
    """The config's ``metrics`` section with ``--metrics-port``, ``--metrics-bind`` and
    ``--metrics-textfile`` over it."""
    updates: dict[str, Any] = {}
    if port is not None:
        updates["port"] = port
    if bind_address is not None:
        updates["bind_address"] = bind_address
    if textfile is not None:
        updates["textfile"] = textfile
    return _over(config.metrics, updates, MetricsSettings, "--metrics-port/--metrics-bind/--metrics-textfile")


@dataclass
class RestoreFlags:
    """The ``restore`` command's options over the ``restore`` section (None or empty: not given)."""

    topics: list[str] = field(default_factory=list)
    topic_mapping: dict[str, str] = field(default_factory=dict)
    repartition: bool | None = None
    target_partitions: dict[str, str] = field(default_factory=dict)
    time_window_start: str | None = None
    time_window_end: str | None = None
    offset_ranges: dict[str, dict[str, dict[str, int | None]]] = field(default_factory=dict)
    exactly_once: bool | None = None
    origin_headers: bool | None = None
    create_topics: bool | None = None
    skip_checksums: bool = False
    log_append_time: str | None = None


@dataclass(frozen=True)
class RestoreInputs:
    backup_id: str | None
    storage: StorageSettings
    target: KafkaConnection | None
    settings: RestoreSettings


def restore_inputs(
    config: KBackupConfig,
    *,
    bootstrap_servers: str | None = None,
    path: str | None = None,
    backup_id: str | None = None,
    flags: RestoreFlags | None = None,
) -> RestoreInputs:
    """What one ``restore`` run needs: backup id, storage, target and restore settings, flags over them."""
    flags = flags or RestoreFlags()
    base = config.restore
    updates: dict[str, Any] = {}
    if flags.topics:
        updates["topics"] = flags.topics
    if flags.topic_mapping:
        updates["topic_mapping"] = {**base.topic_mapping, **flags.topic_mapping}
    if flags.repartition is not None:
        updates["repartition"] = flags.repartition
    if flags.target_partitions:
        updates["target_partitions"] = {**base.target_partitions, **flags.target_partitions}
    if flags.time_window_start is not None:
        updates["time_window_start"] = flags.time_window_start
    if flags.time_window_end is not None:
        updates["time_window_end"] = flags.time_window_end
    if flags.offset_ranges:
        ranges = base.model_dump()["offset_ranges"]
        for topic, partitions in flags.offset_ranges.items():
            ranges.setdefault(topic, {}).update(partitions)
        updates["offset_ranges"] = ranges
    if flags.exactly_once is not None:
        updates["exactly_once"] = flags.exactly_once
    if flags.origin_headers is not None:
        updates["include_original_offset_header"] = flags.origin_headers
    if flags.create_topics is not None:
        updates["create_topics"] = flags.create_topics
    if flags.skip_checksums:
        updates["verify_checksums"] = False
    if flags.log_append_time is not None:
        updates["log_append_time"] = flags.log_append_time
    return RestoreInputs(
        backup_id=backup_id or config.backup_id,
        storage=storage_settings(config, path),
        target=with_bootstrap_servers(config.target, bootstrap_servers, KafkaConnection),
        settings=_over(base, updates, RestoreSettings, "command line"),
    )


@dataclass(frozen=True)
class MappingInputs:
    """The target to scan, the origin cluster whose records are mapped, and how Spark runs."""

    connection: KafkaConnection
    source_cluster: str
    settings: MappingSettings


def mapping_inputs(
    config: KBackupConfig,
    *,
    bootstrap_servers: str | None = None,
    source_cluster: str | None = None,
    spark_master: str | None = None,
    kafka_options: dict[str, str] | None = None,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
    connect_timeout_secs: float | None = None,
) -> MappingInputs:
    """What ``show-offset-mapping`` (and its spark-submit form) scans: flags over the config's
    ``target`` and ``mapping`` sections; the origin cluster from the flag, else the config."""
    connection = with_bootstrap_servers(config.target, bootstrap_servers, KafkaConnection)
    if connection is None:
        raise UsageError("give the target cluster: --bootstrap-servers, or a config with a target section")
    if connect_timeout_secs is not None:
        connection = _over(
            connection, {"connect_timeout_secs": connect_timeout_secs}, KafkaConnection, "--connect-timeout"
        )
    source = source_cluster or config.offset_reset.source_cluster or config.backup.source_cluster_id
    if not source:
        raise UsageError("give --source-cluster: the origin cluster id the restored records carry")
    updates: dict[str, Any] = {}
    if spark_master:
        updates["spark_master"] = spark_master
    if kafka_options:
        updates["kafka_options"] = {**config.mapping.kafka_options, **kafka_options}
    if min_partitions is not None:
        updates["min_partitions"] = min_partitions
    if max_records_per_partition is not None:
        updates["max_records_per_partition"] = max_records_per_partition
    return MappingInputs(
        connection=connection,
        source_cluster=source,
        settings=_over(config.mapping, updates, MappingSettings, "command line"),
    )


def with_engine(config: KBackupConfig, engine: str | None, spark_master: str | None) -> KBackupConfig:
    """The config with ``--engine`` over ``engine`` and ``--spark-master`` over
    ``mapping.spark_master`` (the one Spark master of a config: the engine's and the mapping's)."""
    updates: dict[str, Any] = {}
    if engine is not None:
        if engine not in ("local", "spark"):
            raise UsageError(f"--engine {engine}: choose local or spark")
        updates["engine"] = engine
    if spark_master:
        updates["mapping"] = _over(
            config.mapping, {"spark_master": spark_master}, MappingSettings, "--spark-master"
        )
    return config.model_copy(update=updates) if updates else config


def with_encryption_key(config: KBackupConfig, spec: str | None) -> KBackupConfig:
    """The config with ``--encryption-key`` over ``storage.encryption`` (the rest of ``storage`` kept)."""
    if spec is None:
        return config
    storage = config.storage.model_copy(update={"encryption": encryption_from_spec(spec, "--encryption-key")})
    return config.model_copy(update={"storage": storage})


def spark_engine(config: KBackupConfig) -> SparkEngine | None:
    """Where records are copied: None for ``engine: local`` (this process; Spark is not started)."""
    if config.engine != "spark":
        return None
    mapping = config.mapping
    master = engine_master(mapping.spark_master)
    conf = mapping_spark_conf(master, jars=mapping.spark_jars, extra_conf=mapping.spark_conf)
    return SparkEngine(master=master, conf=conf)


def with_state_dir(config: KBackupConfig, state_dir: str | None) -> KBackupConfig:
    """The config with ``--state-dir`` over ``three_phase.state_dir``."""
    if state_dir is None:
        return config
    three_phase = _over(config.three_phase, {"state_dir": state_dir}, type(config.three_phase), "--state-dir")
    return config.model_copy(update={"three_phase": three_phase})


def three_phase_config(
    config: KBackupConfig,
    *,
    bootstrap_servers: str | None = None,
    path: str | None = None,
    backup_id: str | None = None,
    topics: list[str] | None = None,
    state_dir: str | None = None,
    accept_gap: bool = False,
) -> KBackupConfig:
    """The config ``three-phase-restore`` runs with: the flags over it as ``restore`` puts them
    (:func:`restore_inputs`: ``--bootstrap-servers`` over ``target``, ``--path`` over ``storage``,
    ``--topic`` over ``restore.topics``), ``--backup-id`` over ``backup_id``, ``--state-dir`` and
    ``--accept-gap``; every
    phase reads this one config, so the mapping and the reset see the target, backup and topics the
    restore used (and the run key names them)."""
    inputs = restore_inputs(
        config,
        bootstrap_servers=bootstrap_servers,
        path=path,
        backup_id=backup_id_of(config, backup_id),
        flags=RestoreFlags(topics=topics or []),
    )
    flagged = config.model_copy(
        update={
            "backup_id": inputs.backup_id,
            "storage": inputs.storage,
            "target": inputs.target,
            "restore": inputs.settings,
        }
    )
    if accept_gap:
        three_phase = _over(
            flagged.three_phase, {"accept_gap": True}, type(flagged.three_phase), "--accept-gap"
        )
        flagged = flagged.model_copy(update={"three_phase": three_phase})
    return with_state_dir(flagged, state_dir)
