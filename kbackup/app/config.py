"""The root of a kafka-backup config file: one file may hold the sections of several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from kbackup.app.drill_settings import DrillSettings, ThreePhaseSettings
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import (
    DEFAULT_STORAGE_PATH,
    KafkaConnection,
    StorageSettings,
    StrictModel,
    load_config,
)
from kbackup.core.metrics import MetricsSettings
from kbackup.mapping.settings import MappingSettings
from kbackup.prune.settings import RetentionSettings
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.metadata_settings import MetadataRestoreSettings
from kbackup.restore.settings import RestoreSettings, TargetSettings

Settings = TypeVar("Settings", bound=BaseModel)


class BackupSection(BackupSettings):
    """The ``backup`` section: how a backup is taken, and what its runs keep afterwards."""

    retention: RetentionSettings | None = Field(
        default=None,
        description=(
            "A retention policy applied after each committed increment (one-shot and `--follow`), "
            "as `kafka-backup prune --execute` would apply it (docs/prune.md)."
        ),
    )


Connection = TypeVar("Connection", bound=KafkaConnection)


class KBackupConfig(StrictModel):
    """Everything a config file can say. Each command checks that the sections it needs are there."""

    mode: Literal["backup", "restore", "offset-reset", "three-phase-restore", "drill"] | None = Field(
        default=None,
        description="What the file is for (informative; every command reads the sections it needs).",
    )
    backup_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._=+@,-]{1,200}$",
        description="Name of the backup in the storage location; `--backup-id` overrides it.",
    )
    engine: Literal["local", "spark"] = Field(
        default="local",
        description=(
            "Where backup, restore, three-phase-restore and drill copy records: `local` (this "
            "process) or `spark` (tasks on the Spark master `mapping.spark_master`, with "
            "`mapping.spark_conf`; docs/scaling.md); `--engine` overrides it."
        ),
    )
    source: SourceSettings | None = Field(default=None, description="The cluster backed up.")
    target: TargetSettings | None = Field(default=None, description="The cluster restored to.")
    storage: StorageSettings = Field(default_factory=StorageSettings, description="Where backups live.")
    backup: BackupSection = Field(default_factory=BackupSection, description="How a backup is taken.")
    restore: RestoreSettings = Field(default_factory=RestoreSettings, description="How a backup is replayed.")
    mapping: MappingSettings = Field(
        default_factory=MappingSettings, description="Where the Spark offset-mapping job runs."
    )
    offset_reset: OffsetResetSettings = Field(
        default_factory=OffsetResetSettings, description="How consumer groups are moved."
    )
    three_phase: ThreePhaseSettings = Field(
        default_factory=ThreePhaseSettings, description="The resumable three-phase restore."
    )
    restore_metadata: MetadataRestoreSettings = Field(
        default_factory=MetadataRestoreSettings,
        description="Which cluster metadata (ACLs, SCRAM users, configs) `restore-metadata` brings back.",
    )
    drill: DrillSettings = Field(default_factory=DrillSettings, description="The disaster-recovery drill.")
    metrics: MetricsSettings = Field(
        default_factory=MetricsSettings,
        description="Prometheus metrics and health endpoints (docs/observability.md).",
    )


def load(path: str | Path) -> KBackupConfig:
    """Read and validate a config file (no network access).

    Relative file and folder paths in the file, and the defaults of the folder keys, are made
    absolute against the file's own folder, so a command finds the same files (a three-phase
    restore its earlier state) from whatever folder it is run. Command-line flags are put over
    the result afterwards and stay relative to the current folder.
    """
    config = load_config(path, KBackupConfig)
    return anchored_paths(config, Path(path).absolute().parent)


#: librdkafka properties that name a file (besides the ``security`` keys).
_FILE_PROPERTIES = frozenset(
    {
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.crl.location",
        "ssl.keystore.location",
        "ssl.engine.location",
        "sasl.kerberos.keytab",
    }
)
_SECURITY_FILES = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")


def anchored_paths(config: KBackupConfig, folder: Path) -> KBackupConfig:
    """``config`` with every relative local path in it resolved against ``folder``."""

    def anchor(value: str) -> str:
        # librdkafka's ssl.ca.location 'probe' asks it to find the system's CAs: not a path.
        if value == "probe" or _is_url(value):
            return value
        return str(folder / Path(value).expanduser())  # an absolute value replaces the folder

    def files(model: Settings, *names: str) -> Settings:
        found = {name: getattr(model, name) for name in names}
        return model.model_copy(update={name: anchor(value) for name, value in found.items() if value})

    storage = config.storage
    if storage.url is not None:
        storage = files(storage, "url")
    elif storage.s3_keys_without_a_bucket():
        pass  # no folder to anchor: resolved_url refuses it, unless --path names the bucket
    elif not (storage.backend == "s3" or (storage.backend is None and storage.bucket)):
        # The default folder too: it belongs beside the file like the keys written in it.
        storage = storage.model_copy(update={"path": anchor(storage.path or DEFAULT_STORAGE_PATH)})
    mapping = config.mapping.model_copy(
        update={
            "spark_jars": [anchor(jar) for jar in config.mapping.spark_jars],
            "kafka_options": {
                key: anchor(value) if key.removeprefix("kafka.").endswith(".location") else value
                for key, value in config.mapping.kafka_options.items()
            },
        }
    )
    restore = config.restore.model_copy(
        update={
            "filters": [
                rule.model_copy(update={"keys_file": Path(anchor(str(rule.keys_file)))})
                if rule.keys_file is not None
                else rule
                for rule in config.restore.filters
            ]
        }
    )
    return config.model_copy(
        update={
            "restore": restore,
            "source": _anchored_connection(config.source, anchor),
            "target": _anchored_connection(config.target, anchor),
            "storage": storage,
            "backup": files(config.backup, "scratch_dir"),
            "mapping": mapping,
            "offset_reset": files(config.offset_reset, "snapshot_dir", "mapping_file"),
            "three_phase": files(config.three_phase, "state_dir"),
            "drill": files(config.drill, "report_path"),
            "restore_metadata": files(config.restore_metadata, "scram_passwords_file"),
            "metrics": files(config.metrics, "textfile"),
        }
    )


def _anchored_connection(connection: Connection | None, anchor: Callable[[str], str]) -> Connection | None:
    if connection is None:
        return None
    security = connection.security
    security = security.model_copy(
        update={name: anchor(getattr(security, name)) for name in _SECURITY_FILES if getattr(security, name)}
    )
    properties = {
        name: anchor(value) if name in _FILE_PROPERTIES and isinstance(value, str) else value
        for name, value in connection.properties.items()
    }
    return connection.model_copy(update={"security": security, "properties": properties})


def _is_url(value: str) -> bool:
    """``s3://b``, ``file:///x``, ``hdfs://...``: not a local path to anchor (a Windows drive
    letter, ``C:\\x``, is a path)."""
    scheme = urlparse(value).scheme
    return len(scheme) > 1 or value.startswith("file:")
