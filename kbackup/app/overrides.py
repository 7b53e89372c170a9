"""Command-line flags over the config file, in one place.

Every command that takes a config file and flags builds its inputs here: the file's section with
the flags put over it, then validated as the config loader validates (a bad value is one
``ConfigError`` naming the flag; secrets are registered for redaction). A flag replaces only what
it names: ``--bootstrap-servers`` keeps the connection's security settings, properties and
timeout; ``--path`` keeps the storage's S3 endpoint, region, credentials and server-side
encryption. The stages receive the finished settings, never the whole config.

A problem with a flag's value names the flag as the user typed it (``--time-window-end
2026-11-20: ...``), not the config key it was put over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel

from kbackup.app.config import KBackupConfig
from kbackup.backup import BackupJob
from kbackup.backup.settings import SourceSettings
from kbackup.core.config import (
    AZURE_SCHEMES,
    KafkaConnection,
    StorageSettings,
    encryption_from_spec,
    url_query_settings,
    validate_config,
)
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.metrics import MetricsSettings
from kbackup.core.spark import SparkEngine, engine_master
from kbackup.mapping.settings import MappingSettings
from kbackup.mapping.spark_session import spark_conf as mapping_spark_conf
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.settings import RestoreSettings

Connection = TypeVar("Connection", bound=KafkaConnection)
Settings = TypeVar("Settings", bound=BaseModel)

BOOTSTRAP_FLAG = "--bootstrap-servers"
#: A cluster given neither by an option nor by the config file: the command was called wrong (exit 2).
NO_TARGET_CLUSTER = "no target cluster: give --bootstrap-servers or set a target section in the config file"
NO_SOURCE_CLUSTER = "no source cluster: give --bootstrap-servers or set a source section in the config file"
NO_BACKUP_ID = "no backup id: give --backup-id or set backup_id in the config file"


def _over(
    base: Settings,
    updates: dict[str, Any],
    model: type[Settings],
    source: str,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """``base`` with ``updates`` put over it, validated like a config file section; ``flags``: the
    option each updated key came from, as typed, for the error that names it."""
    if not updates:
        return base
    return validate_config({**base.model_dump(), **updates}, model, source, flags=flags)


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
    return validate_config(data, model, BOOTSTRAP_FLAG, flags={"bootstrap_servers": BOOTSTRAP_FLAG})


def target_connection(config: KBackupConfig, bootstrap_servers: str | None) -> KafkaConnection:
    """The cluster groups move on: the config's ``target`` with ``--bootstrap-servers`` over it."""
    connection = with_bootstrap_servers(config.target, bootstrap_servers, KafkaConnection)
    if connection is None:
        raise UsageError(NO_TARGET_CLUSTER)
    return connection


def reset_cluster(config: KBackupConfig, bootstrap_servers: str | None, *, rewind: bool) -> KafkaConnection:
    """The cluster an ``offset-reset`` moves groups on: the target (``target_connection``); for a
    rewind (``strategy: rewind``), the cluster the backup was taken from: its ``source`` section
    with ``--bootstrap-servers`` over it (the target, if the file has no source section); ``rewind``:
    the plan is (or will be) ``strategy: rewind``."""
    if rewind and config.source is not None:
        connection = with_bootstrap_servers(config.source, bootstrap_servers, KafkaConnection)
        if connection is not None:
            return connection
    return target_connection(config, bootstrap_servers)


def _groups_as_of(reset: OffsetResetSettings, restore: RestoreSettings) -> OffsetResetSettings:
    """A three-phase restore as of a time moves the groups to their positions of that time: the
    records and the groups of one moment (``restore.as_of`` is ``offset_reset.as_of`` too)."""
    if restore.as_of is None:
        return reset
    if reset.as_of is not None and reset.as_of != restore.as_of:
        raise ConfigError(
            f"restore.as_of ({restore.as_of.isoformat()}) and offset_reset.as_of "
            f"({reset.as_of.isoformat()}) differ: a three-phase restore takes the records and the "
            "groups of one moment",
            hint="set only restore.as_of (or --as-of)",
        )
    return reset.model_copy(update={"as_of": restore.as_of})


def with_restore_as_of(config: KBackupConfig, as_of: str | None) -> KBackupConfig:
    """``--as-of TIME`` over ``restore.as_of`` (``drill``), checked as the file's key is: a time
    without a zone is refused (exit 3), before anything runs."""
    if as_of is None:
        return config
    section = _over(
        config.restore, {"as_of": as_of}, RestoreSettings, "command line", {"as_of": f"--as-of {as_of}"}
    )
    return config.model_copy(update={"restore": section})


def with_point_in_time(config: KBackupConfig, as_of: str | None, in_place: bool) -> KBackupConfig:
    """``--as-of`` over ``offset_reset.as_of``, ``--in-place`` as ``offset_reset.strategy: rewind``
    (checked as the file's keys are: a time without a zone is refused)."""
    if as_of is None and not in_place:
        return config
    updates: dict[str, Any] = {}
    if as_of is not None:
        updates["as_of"] = as_of
    if in_place:
        updates["strategy"] = "rewind"
    section = _over(
        config.offset_reset,
        updates,
        OffsetResetSettings,
        "command line",
        {"as_of": "--as-of", "strategy": "--in-place"},
    )
    return config.model_copy(update={"offset_reset": section})


def storage_settings(config: KBackupConfig, path: str | None, *, run: bool = False) -> StorageSettings:
    """The config's storage section, with ``--path`` replacing only its location.

    A query in ``--path`` (``?region=R&endpoint=URL``) replaces the keys it names too. Without
    ``run`` the settings are for a command a person waits on (``list``, ``describe``, ``status``,
    ``validate``, a plan of ``prune`` or ``rekey``): a store that refuses connections fails it in
    seconds, unless the file sets ``storage.max_attempts`` or ``storage.retry_timeout_secs``.
    ``run`` (backup, restore, three-phase restore, and what works unattended for minutes:
    ``prune --execute``, ``rekey --execute``, ``validate --deep``): the file's patience, to ride
    out a restart.
    """
    settings = config.storage if path is None else _storage_at(config.storage, path)
    return settings if run else settings.for_interactive_command()


def _storage_at(storage: StorageSettings, path: str) -> StorageSettings:
    # Only the keys the file set are carried over, so the storage knows which retries it was given.
    data = storage.model_dump(exclude={"url", "backend", "path", "bucket", "prefix"}, exclude_unset=True)
    try:
        named_by_query = url_query_settings(path)
    except ValueError:
        named_by_query = {}  # refused below, by the same check, with the flag named
    for name in named_by_query:
        data.pop(name, None)
    if urlparse(path).scheme != "s3":
        # A folder given for a file written for S3 (list -c prod.yaml -p ./copy): the S3 settings
        # are the file's bucket's, not the folder's; kept, the folder would be refused for them.
        for name in storage.s3_only_keys():
            data.pop(name, None)
    if urlparse(path).scheme not in AZURE_SCHEMES:
        data.pop("azure", None)  # the account and credentials of the file's container, not the path's
    if urlparse(path).scheme != "gs":
        data.pop("gcs", None)  # as the S3 keys: the file's bucket's settings, not the new location's
    data["url"] = path
    return validate_config(data, StorageSettings, "--path", flags={"url": "--path"})


def backup_id_of(config: KBackupConfig, backup_id: str | None) -> str:
    chosen = backup_id or config.backup_id
    if not chosen:
        raise UsageError(NO_BACKUP_ID)
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
    max_bytes_per_second: str | None = None,
    workers: int | None = None,
) -> BackupJob:
    """What one ``backup`` run needs: the file's source, storage and backup sections, flags over them."""
    source = with_bootstrap_servers(config.source, bootstrap_servers, SourceSettings)
    if source is None:
        raise UsageError(NO_SOURCE_CLUSTER)
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
            flags={"topics.include": "--include", "topics.exclude": "--exclude"},
        )
    updates: dict[str, Any] = {}
    flags: dict[str, str] = {}
    if source_cluster_id:
        updates["source_cluster_id"] = source_cluster_id
        flags["source_cluster_id"] = f"--source-cluster-id {source_cluster_id}"
    if follow:
        updates["continuous"] = True
        flags["continuous"] = "--follow"
    if max_bytes_per_second is not None:
        updates["max_bytes_per_second"] = max_bytes_per_second
        flags["max_bytes_per_second"] = f"--max-bytes-per-second {max_bytes_per_second}"
    if workers is not None:
        updates["workers"] = workers
        flags["workers"] = f"--workers {workers}"
    return BackupJob(
        backup_id=backup_id_of(config, backup_id),
        source=source,
        storage=storage_settings(config, path, run=True),
        settings=_over(config.backup, updates, type(config.backup), "command line", flags),
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
    flags: dict[str, str] = {}
    if port is not None:
        updates["port"] = port
        flags["port"] = f"--metrics-port {port}"
    if bind_address is not None:
        updates["bind_address"] = bind_address
        flags["bind_address"] = f"--metrics-bind {bind_address}"
    if textfile is not None:
        updates["textfile"] = textfile
        flags["textfile"] = f"--metrics-textfile {textfile}"
    return _over(
        config.metrics, updates, MetricsSettings, "--metrics-port/--metrics-bind/--metrics-textfile", flags
    )


@dataclass
class RestoreFlags:
    """The ``restore`` command's options over the ``restore`` section (None or empty: not given)."""

    topics: list[str] = field(default_factory=list)
    topic_mapping: dict[str, str] = field(default_factory=dict)
    repartition: bool | None = None
    target_partitions: dict[str, str] = field(default_factory=dict)
    time_window_start: str | None = None
    time_window_end: str | None = None
    #: ``--as-of TIME``: ``restore.as_of``.
    as_of: str | None = None
    offset_ranges: dict[str, dict[str, dict[str, int | None]]] = field(default_factory=dict)
    exactly_once: bool | None = None
    origin_headers: bool | None = None
    create_topics: bool | None = None
    skip_checksums: bool = False
    log_append_time: str | None = None
    #: ``--drop-keys-file`` / ``--tombstone-keys-file``: a rule for every topic, after the file's.
    drop_keys_file: str | None = None
    tombstone_keys_file: str | None = None
    max_bytes_per_second: str | None = None
    max_records_per_second: int | None = None
    purge_target: str | None = None
    force_purge: bool = False
    #: ``--workers N``: worker processes of the local engine.
    workers: int | None = None


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
    #: Each key a flag set, and the flag as the user typed it (for the error that names it).
    typed: dict[str, str] = {}
    if flags.topics:
        updates["topics"] = flags.topics
        typed["topics"] = "--topic"
    if flags.topic_mapping:
        updates["topic_mapping"] = {**base.topic_mapping, **flags.topic_mapping}
        typed["topic_mapping"] = "--topic-mapping"
    if flags.repartition is not None:
        updates["repartition"] = flags.repartition
        typed["repartition"] = "--repartition" if flags.repartition else "--no-repartition"
    if flags.target_partitions:
        updates["target_partitions"] = {**base.target_partitions, **flags.target_partitions}
        typed["target_partitions"] = "--target-partitions"
    if flags.time_window_start is not None:
        updates["time_window_start"] = flags.time_window_start
        typed["time_window_start"] = f"--time-window-start {flags.time_window_start}"
    if flags.time_window_end is not None:
        updates["time_window_end"] = flags.time_window_end
        typed["time_window_end"] = f"--time-window-end {flags.time_window_end}"
    if flags.as_of is not None:
        updates["as_of"] = flags.as_of
        typed["as_of"] = f"--as-of {flags.as_of}"
    if flags.offset_ranges:
        ranges = base.model_dump()["offset_ranges"]
        for topic, partitions in flags.offset_ranges.items():
            ranges.setdefault(topic, {}).update(partitions)
        updates["offset_ranges"] = ranges
        typed["offset_ranges"] = "--offset-range"
    if flags.exactly_once is not None:
        updates["exactly_once"] = flags.exactly_once
        typed["exactly_once"] = "--exactly-once" if flags.exactly_once else "--idempotent"
    if flags.origin_headers is not None:
        updates["include_original_offset_header"] = flags.origin_headers
        typed["include_original_offset_header"] = (
            "--origin-headers" if flags.origin_headers else "--no-origin-headers"
        )
    if flags.create_topics is not None:
        updates["create_topics"] = flags.create_topics
        typed["create_topics"] = "--create-topics" if flags.create_topics else "--no-create-topics"
    if flags.skip_checksums:
        updates["verify_checksums"] = False
        typed["verify_checksums"] = "--skip-checksums"
    if flags.log_append_time is not None:
        updates["log_append_time"] = flags.log_append_time
        typed["log_append_time"] = f"--log-append-time {flags.log_append_time}"
    _add_keys_file_rules(base, flags, updates, typed)
    _rate_and_purge_flags(flags, updates, typed)
    return RestoreInputs(
        backup_id=backup_id or config.backup_id,
        storage=storage_settings(config, path, run=True),
        target=with_bootstrap_servers(config.target, bootstrap_servers, KafkaConnection),
        settings=_over(base, updates, RestoreSettings, "command line", typed),
    )


def _add_keys_file_rules(
    base: RestoreSettings, flags: RestoreFlags, updates: dict[str, Any], typed: dict[str, str]
) -> None:
    """The rules ``--drop-keys-file`` and ``--tombstone-keys-file`` add for every topic, after the
    file's; a relative path is the current folder's, as for every flag."""
    given = [
        (action, path)
        for action, path in (("drop", flags.drop_keys_file), ("tombstone", flags.tombstone_keys_file))
        if path is not None
    ]
    if not given:
        return
    added = [{"action": action, "keys_file": str(Path(path).absolute())} for action, path in given]
    updates["filters"] = [*base.model_dump()["filters"], *added]
    typed["filters"] = " ".join(f"--{action}-keys-file {path}" for action, path in given)


def _rate_and_purge_flags(flags: RestoreFlags, updates: dict[str, Any], typed: dict[str, str]) -> None:
    """``--max-bytes-per-second``, ``--max-records-per-second``, ``--purge-target``, ``--force-purge``,
    ``--workers``."""
    given: dict[str, Any] = {
        "workers": flags.workers,
        "max_bytes_per_second": flags.max_bytes_per_second,
        "max_records_per_second": flags.max_records_per_second,
        "purge_target": flags.purge_target,
        "force_purge": True if flags.force_purge else None,
    }
    for key, value in given.items():
        if value is not None:
            updates[key] = value
            flag = "--" + key.replace("_", "-")
            typed[key] = flag if value is True else f"{flag} {value}"


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
        raise UsageError(NO_TARGET_CLUSTER)
    if connect_timeout_secs is not None:
        connection = _over(
            connection,
            {"connect_timeout_secs": connect_timeout_secs},
            KafkaConnection,
            "--connect-timeout",
            {"connect_timeout_secs": f"--connect-timeout {connect_timeout_secs:g}"},
        )
    source = source_cluster or config.offset_reset.source_cluster or config.backup.source_cluster_id
    if not source:
        raise UsageError("give --source-cluster: the origin cluster id the restored records carry")
    updates: dict[str, Any] = {}
    typed: dict[str, str] = {}
    if spark_master:
        updates["spark_master"] = spark_master
        typed["spark_master"] = "--spark-master"
    if kafka_options:
        updates["kafka_options"] = {**config.mapping.kafka_options, **kafka_options}
        typed["kafka_options"] = "--kafka-option"  # never with its value: it may be a secret
    if min_partitions is not None:
        updates["min_partitions"] = min_partitions
        typed["min_partitions"] = f"--min-partitions {min_partitions}"
    if max_records_per_partition is not None:
        updates["max_records_per_partition"] = max_records_per_partition
        typed["max_records_per_partition"] = f"--max-records-per-partition {max_records_per_partition}"
    return MappingInputs(
        connection=connection,
        source_cluster=source,
        settings=_over(config.mapping, updates, MappingSettings, "command line", typed),
    )


def with_engine(config: KBackupConfig, engine: str | None, spark_master: str | None) -> KBackupConfig:
    """The config with ``--engine`` over ``engine`` and ``--spark-master`` over
    ``mapping.spark_master`` (the one Spark master of a config: the engine's and the mapping's)."""
    updates: dict[str, Any] = {}
    if engine is not None:
        if engine not in ("local", "spark"):
            raise ConfigError(f"--engine {engine}: choose local or spark")
        updates["engine"] = engine
    if spark_master:
        updates["mapping"] = _over(
            config.mapping,
            {"spark_master": spark_master},
            MappingSettings,
            "--spark-master",
            {"spark_master": "--spark-master"},
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
    three_phase = _over(
        config.three_phase,
        {"state_dir": state_dir},
        type(config.three_phase),
        "--state-dir",
        {"state_dir": f"--state-dir {state_dir}"},
    )
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
    drop_keys_file: str | None = None,
    tombstone_keys_file: str | None = None,
    rates: RestoreFlags | None = None,
    as_of: str | None = None,
) -> KBackupConfig:
    """The config ``three-phase-restore`` runs with: the flags over it as ``restore`` puts them
    (:func:`restore_inputs`: ``--bootstrap-servers`` over ``target``, ``--path`` over ``storage``,
    ``--topic`` over ``restore.topics``, ``--drop-keys-file``/``--tombstone-keys-file`` after
    ``restore.filters``), ``--backup-id`` over ``backup_id``, ``--state-dir`` and ``--accept-gap``, and
    ``rates``' ``--max-bytes-per-second``/``--max-records-per-second``/``--workers``; every
    phase reads this one config, so the mapping and the reset see the target, backup and topics the
    restore used (and the run key names them)."""
    inputs = restore_inputs(
        config,
        bootstrap_servers=bootstrap_servers,
        path=path,
        backup_id=backup_id_of(config, backup_id),
        flags=RestoreFlags(
            topics=topics or [],
            drop_keys_file=drop_keys_file,
            tombstone_keys_file=tombstone_keys_file,
            max_bytes_per_second=rates.max_bytes_per_second if rates is not None else None,
            max_records_per_second=rates.max_records_per_second if rates is not None else None,
            workers=rates.workers if rates is not None else None,
            as_of=as_of,
        ),
    )
    flagged = config.model_copy(
        update={
            "backup_id": inputs.backup_id,
            "storage": inputs.storage,
            "target": inputs.target,
            "restore": inputs.settings,
            "offset_reset": _groups_as_of(config.offset_reset, inputs.settings),
        }
    )
    if accept_gap:
        three_phase = _over(
            flagged.three_phase, {"accept_gap": True}, type(flagged.three_phase), "--accept-gap"
        )
        flagged = flagged.model_copy(update={"three_phase": three_phase})
    return with_state_dir(flagged, state_dir)
