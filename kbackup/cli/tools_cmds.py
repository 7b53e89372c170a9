"""``check`` (preflight of a config) and ``sandbox`` (throwaway local clusters)."""

from __future__ import annotations

import signal
import time
from typing import Annotated, Any

import typer

from kbackup.app.overrides import with_bootstrap_servers
from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, json_mode, load_config, print_json
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import UsageError
from kbackup.core.kafka import check_client_properties, open_admin
from kbackup.storage import open_storage

#: How long ``check`` waits for each storage request: a preflight answers in seconds, where a run
#: retries a failing request for storage.retry_timeout_secs.
CHECK_STORAGE_TIMEOUT_SECS = 5.0


def check(
    config: ConfigOption = None,
    bootstrap_servers: BootstrapOption = None,
    as_json: JsonOption = False,
) -> None:
    """Validate a config file, then reach every cluster and the storage it names. Changes nothing.

    \b
    Example:
      kafka-backup check -c backup.yaml
    """
    json_mode(as_json)
    cfg = load_config(config)
    clusters: dict[str, KafkaConnection] = {}
    flag_cluster = with_bootstrap_servers(None, bootstrap_servers, KafkaConnection)
    if flag_cluster is not None:
        clusters["cluster"] = flag_cluster
    if cfg.source is not None:
        clusters["source"] = cfg.source
    if cfg.target is not None:
        clusters["target"] = cfg.target
    if not clusters:
        raise UsageError(
            "nothing to check: give --config with a source or target section, or --bootstrap-servers"
        )
    # Offline checks of every connection first, so a typo fails before any network call.
    for connection in clusters.values():
        check_client_properties(connection)
    report: dict[str, Any] = {}
    for role, connection in clusters.items():
        info = open_admin(connection).metadata()
        report[role] = {
            "bootstrap_servers": connection.bootstrap_servers,
            "cluster_id": info.cluster_id,
            "brokers": len(info.brokers),
            "topics": len(info.topics),
        }
    storage = open_storage(cfg.storage, check_timeout_secs=CHECK_STORAGE_TIMEOUT_SECS)
    exists = storage.location_exists()
    objects = sum(1 for _ in storage.list("")) if exists else 0
    report["storage"] = {"url": storage.url, "exists": exists, "objects": objects}
    if as_json:
        print_json(report)
        return
    for role, item in report.items():
        if role == "storage":
            found = "reachable" if item["exists"] else "no such folder yet (a backup creates it)"
            typer.echo(f"{role:<8} {item['url']}: {found}, {item['objects']} object(s)")
        else:
            typer.echo(
                f"{role:<8} {','.join(item['bootstrap_servers'])}: cluster id {item['cluster_id']}, "
                f"{item['brokers']} broker(s), {item['topics']} topic(s)"
            )


def sandbox(
    clusters: Annotated[
        int, typer.Option("--clusters", "-n", min=1, max=4, metavar="N", help="How many clusters.")
    ] = 2,
    hold: Annotated[
        bool, typer.Option("--hold", help="Keep the clusters running until Ctrl-C (else stop at once).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Start throwaway single-node Apache Kafka clusters on loopback (real brokers, KRaft mode).

    The broker jars come from Maven Central the first time (cached in
    ~/.cache/kafka-backup). Used by the local drill, the tests and the benchmarks.

    \b
    Example:
      kafka-backup sandbox -n 2
    """
    json_mode(as_json)
    from kbackup.sandbox.kafka import local_clusters

    names = ["source", "target", "cluster-3", "cluster-4"][:clusters]
    started = time.monotonic()
    with local_clusters(names) as running:
        elapsed = time.monotonic() - started
        rows = [
            {"name": c.name, "bootstrap_servers": c.bootstrap_servers, "cluster_id": c.cluster_id}
            for c in running
        ]
        if as_json:
            print_json({"clusters": rows, "startup_seconds": round(elapsed, 2)})
        else:
            for row in rows:
                typer.echo(
                    f"{row['name']:<8} up at {row['bootstrap_servers']}  cluster id {row['cluster_id']}"
                )
            typer.echo(f"{len(rows)} local Kafka cluster(s) up in {elapsed:.1f}s")
        if hold:
            typer.echo("holding; press Ctrl-C to stop", err=True)
            stop = False

            def _stop(_signum: int, _frame: object) -> None:
                nonlocal stop
                stop = True

            signal.signal(signal.SIGTERM, _stop)
            try:
                while not stop:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
    if not as_json:
        typer.echo("stopped all local clusters")
