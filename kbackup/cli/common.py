"""Options and helpers shared by the CLI's commands. The only layer that knows about typer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kbackup.app import config as config_module
from kbackup.core.progress import disable_progress
from kbackup.core.secrets import redact

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="YAML config file (see docs/configuration.md).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON on stdout (progress bars off).")
]
BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers",
        "-b",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="host:port[,host:port...] of the cluster; overrides the config.",
    ),
]

# The metrics options of the commands that run long (docs/observability.md); they go over the
# config's metrics section.
EncryptionKeyOption = Annotated[
    str | None,
    typer.Option(
        "--encryption-key",
        metavar="SOURCE",
        help="Key of an encrypted backup: file:PATH, env:VARIABLE or kms:KEY_ID; config: storage.encryption.",
    ),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="local|spark",
        help="Copy records in this process (local, the default) or in Spark tasks (spark); config: engine.",
    ),
]
SparkMasterOption = Annotated[
    str | None,
    typer.Option(
        "--spark-master",
        metavar="URL",
        help="Spark master for --engine spark and the mapping (default: mapping.spark_master).",
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
        "--metrics-bind", metavar="ADDRESS", help="Address the metrics server listens on (0.0.0.0)."
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
    """Repeated ``NAME=VALUE`` options as a mapping (a later name wins)."""
    from kbackup.core.errors import UsageError

    found: dict[str, str] = {}
    for value in values or []:
        name, sep, other = value.partition("=")
        if not sep or not name or not (other or empty_values):
            raise UsageError(f"{option} {value!r}: expected NAME=VALUE")
        found[name] = other
    return found
