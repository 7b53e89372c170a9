"""Options and helpers shared by the CLI's commands. The only layer that knows about typer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kbackup.app import config as config_module
from kbackup.app.overrides import target_connection
from kbackup.cli.signals import stop_on_signals
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.progress import Progress, disable_progress
from kbackup.core.secrets import redact
from kbackup.format.reset_plan import TargetInfo

if TYPE_CHECKING:
    from kbackup.core.metrics import MetricsSettings, RunMetrics

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="YAML config file (its keys: kafka-backup docs configuration).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON on stdout (progress bars off).")
]
#: The bootstrap flag as its errors name it: -b and Kafka's --bootstrap-server are the same option.
BOOTSTRAP_FLAG = "--bootstrap-servers"
#: The ports a broker can listen on.
PORTS = range(1, 65536)


def checked_bootstrap_servers(ctx: typer.Context, value: str | None) -> str | None:
    """``--bootstrap-servers`` refused at once when it cannot name brokers: empty, not host:port,
    a port outside 1-65535 (else a command waits its connect timeout on a cluster that cannot be).

    OSO kafka-backup's ``-b`` is the backup id: a value that is no host:port says what ``-b`` is
    here, and points to ``--backup-id`` where the command has one.
    """
    if value is None:
        return None
    servers = [part.strip() for part in value.split(",") if part.strip()]
    if not servers:
        raise ConfigError(
            f"{BOOTSTRAP_FLAG} is empty: give host:port[,host:port...] of the cluster's brokers, or leave "
            "the option out to use the config file's"
        )
    for server in servers:
        if "@" in server:
            continue  # refused by the connection's own check, without echoing the credentials
        host, colon, port = server.rpartition(":")
        if "://" in server:
            problem = "write host:port, not a URL"
        elif not colon or not host:
            raise _not_brokers(ctx, server)
        elif any(char.isspace() for char in server) or "/" in server:
            problem = "expected host:port"
        elif not port.isdigit():
            problem = f"the port {port!r} is not a number"
        elif int(port) not in PORTS:
            problem = f"port {int(port)} is not between 1 and 65535"
        else:
            continue
        raise ConfigError(f"{BOOTSTRAP_FLAG} {server!r}: {problem}")
    return value


def _not_brokers(ctx: typer.Context, server: str) -> ConfigError:
    takes_backup_id = any(param.name == "backup_id" for param in ctx.command.params)
    return ConfigError(
        f"{BOOTSTRAP_FLAG} {server!r}: expected host:port; -b here is the cluster's bootstrap servers "
        "(Kafka's --bootstrap-server), not a backup id as in OSO kafka-backup",
        hint=f"name the backup with --backup-id {server}"
        if takes_backup_id
        else "give host:port, e.g. kafka:9092",
    )


def bootstrap_option(help_text: str) -> Any:
    """``-b``/``--bootstrap-servers``/``--bootstrap-server`` with its value check, for every command."""
    return typer.Option(
        BOOTSTRAP_FLAG,
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT[,HOST:PORT...]",
        help=help_text,
        callback=checked_bootstrap_servers,
    )


BootstrapOption = Annotated[
    str | None, bootstrap_option("host:port[,host:port...] of the cluster; overrides the config.")
]


def checked_path(value: str | None) -> str | None:
    """An empty ``--path`` is a mistake (a variable that was not set), not the config's storage."""
    if value is not None and not value.strip():
        raise ConfigError(
            "--path is empty: give a folder, file:///folder, s3://bucket/prefix, gs://bucket/prefix or "
            "az://container/prefix, or leave the option out to use storage.url"
        )
    return value


def storage_path_option(help_text: str) -> Any:
    """``--path``/``-p``, the storage URL over ``storage.url``."""
    return typer.Option("--path", "-p", metavar="URL", help=help_text, callback=checked_path)


#: The most nodes a local cluster has (kbackup.sandbox.kafka.MAX_NODES: the CLI layer outside
#: tools_cmds does not import the sandbox, which a unit test keeps equal).
MAX_LOCAL_NODES = 5


def local_nodes_option(help_text: str) -> Any:
    """``--nodes``: broker+controller nodes per local cluster (``sandbox``, ``drill --local``)."""
    return typer.Option("--nodes", min=1, max=MAX_LOCAL_NODES, metavar="N", help=help_text)


PathOption = Annotated[
    str | None,
    storage_path_option(
        "Storage URL: a folder, file:///folder, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix."
    ),
]
BackupIdOption = Annotated[str | None, typer.Option("--backup-id", metavar="ID", help="Name of the backup.")]
#: The backup a restore command reads, and the backup it restores.
RestorePathOption = Annotated[str | None, storage_path_option("Storage URL of the backup.")]
RestoreBackupIdOption = Annotated[
    str | None, typer.Option("--backup-id", metavar="ID", help="Backup to restore.")
]


# The metrics options of the commands that run long (docs/observability.md); they go over the
# config's metrics section.
EncryptionKeyOption = Annotated[
    str | None,
    typer.Option(
        "--encryption-key",
        metavar="SOURCE",
        help="Key of an encrypted backup: file:PATH, env:VARIABLE or kms:KEY_ID.",
        show_default="storage.encryption",
    ),
]
ENGINES = ("local", "spark")


def checked_engine(value: str | None) -> str | None:
    """``--engine`` other than local or spark: a wrong value, refused before the config is read."""
    if value is not None and value not in ENGINES:
        raise ConfigError(f"--engine {value}: choose local or spark")
    return value


EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="local|spark",
        help="Copy records in this process (local) or in Spark tasks (spark).",
        show_default="engine, else local",
        callback=checked_engine,
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        metavar="N",
        help="Worker processes of the local engine, each restoring one source partition at a time.",
        show_default="restore.workers, else auto: one per two cores for 100,000 records or more",
    ),
]
SparkMasterOption = Annotated[
    str | None,
    typer.Option(
        "--spark-master",
        metavar="URL",
        help="Spark master for --engine spark and the mapping.",
        show_default="mapping.spark_master",
    ),
]
MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        metavar="PORT",
        help="Serve /metrics (Prometheus), /healthz and /readyz on this port while the command runs.",
    ),
]
MetricsBindOption = Annotated[
    str | None,
    typer.Option(
        "--metrics-bind",
        metavar="ADDRESS",
        help="Address the metrics server listens on.",
        show_default="metrics.bind, else 0.0.0.0",
    ),
]
MetricsTextfileOption = Annotated[
    str | None,
    typer.Option(
        "--metrics-textfile",
        metavar="PATH",
        help="Write the metrics to this file at each checkpoint and at exit (node-exporter).",
    ),
]


@dataclass
class RunContext:
    """What a command that runs long hands its run: the event SIGINT/SIGTERM set, and the bars."""

    stop: threading.Event
    progress: Progress


@contextmanager
def run_context(metrics: RunMetrics, settings: MetricsSettings, *, on_signal: str) -> Iterator[RunContext]:
    """The time a long command runs (backup, restore, three-phase-restore, drill): its metrics
    served and written as ``settings`` say (a wrong setting is refused on entry, before any work),
    SIGINT/SIGTERM turned into a stop at the run's next safe point (``on_signal`` says what stopping
    does), and the progress bars."""
    from kbackup.core.metrics import exported

    with exported(metrics, settings), stop_on_signals(on_signal) as stop, Progress() as progress:
        yield RunContext(stop, progress)


def load_config(path: Path | None) -> config_module.KBackupConfig:
    """The config file if given, else the embedded defaults."""
    if path is None:
        return config_module.KBackupConfig()
    return config_module.load(path)


def print_json(payload: Any) -> None:
    """Machine-readable output: JSON on stdout, secrets redacted."""
    print(redact(json.dumps(payload, indent=2, sort_keys=False, default=str)))


def json_mode(enabled: bool) -> bool:
    if enabled:
        disable_progress()
    return enabled


def pairs(values: list[str] | None, option: str, *, empty_values: bool = False) -> dict[str, str]:
    """Repeated ``NAME=VALUE`` options as a mapping (a later name wins); a value of another shape
    is a wrong value (exit 3), as any option's."""
    found: dict[str, str] = {}
    for value in values or []:
        name, sep, other = value.partition("=")
        if not sep or not name or not (other or empty_values):
            raise ConfigError(f"{option} {value!r}: expected NAME=VALUE")
        found[name] = other
    return found


def duration_flag(flag: str, value: str) -> float:
    """Seconds of a duration option. A value that is none is a wrong value (exit 3), in the words
    a config-validated duration option gets (prune's ``--older-than 3x: '3x' is not a duration``)."""
    from kbackup.core.durations import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{flag} {value}: {exc}") from None


def plan_target(
    config: config_module.KBackupConfig,
    bootstrap_servers: str | None,
    *,
    command: str,
    plan_file: Path,
    planned: TargetInfo,
    hint: str,
) -> KafkaConnection:
    """The cluster an ``execute --plan`` applies a plan to: the config's target with ``-b`` over it;
    without either, one line naming the cluster the plan was made for (a plan carries no secret,
    so the connection's security settings come from the config)."""
    if config.target is None and not bootstrap_servers:
        raise UsageError(
            f"{command} needs the target's connection: plan {plan_file} is for cluster "
            f"{planned.cluster_id} at {','.join(planned.bootstrap_servers)}",
            hint=hint,
        )
    return target_connection(config, bootstrap_servers)
