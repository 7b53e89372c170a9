"""``check`` (preflight of a config, offline or reaching every part) and ``sandbox`` (throwaway
local clusters)."""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer

from kbackup.app.overrides import with_bootstrap_servers
from kbackup.app.preflight import PartResult, check_config, clusters_of, first_failure, flag_cluster_base
from kbackup.cli.common import (
    ConfigOption,
    JsonOption,
    bootstrap_option,
    json_mode,
    load_config,
    local_nodes_option,
    print_json,
)
from kbackup.core.config import KafkaConnection
from kbackup.core.secrets import redact

CheckBootstrapOption = Annotated[
    str | None,
    bootstrap_option(
        "Check this cluster instead of the config's source and target (with the security "
        "settings of its source, else its target)."
    ),
]


def check(
    config: ConfigOption = None,
    bootstrap_servers: CheckBootstrapOption = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Check every section without reaching Kafka, the storage or Spark: librdkafka "
            "settings, files, and rules across sections.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Validate a config, then reach every cluster, the storage and the Spark master. Changes nothing.

    Each part (source, target, storage, spark, a rule across sections) is tried and reported
    with its role, whatever another found; the exit code is the first failure's (source,
    target, storage, spark, rules: in that order), 0 when all pass.

    \b
    Example:
      kafka-backup check -c backup.yaml
      kafka-backup check --offline -c backup.yaml
    """
    json_mode(as_json)
    cfg = load_config(config)
    flag_cluster = (
        with_bootstrap_servers(flag_cluster_base(cfg), bootstrap_servers, KafkaConnection)
        if bootstrap_servers
        else None
    )
    results = check_config(cfg, clusters_of(cfg, flag_cluster), offline=offline)
    failure = first_failure(results)
    if as_json:
        parts = [item.to_dict() for item in results]
        # Each cluster and the storage also under its role, as check --json has always given them.
        by_role = {part["role"]: part for part in parts if part["subject"] != "rule"}
        print_json({**by_role, "ok": failure is None, "offline": offline, "parts": parts})
        if failure is not None:
            raise typer.Exit(failure.exit_code)
        return
    for item in results:
        typer.echo(redact(_line(item)))
    if failure is not None:
        raise failure


def _line(item: PartResult) -> str:
    if item.error is None:
        return f"{item.role:<8} {item.subject}: {item.found}"
    failed = f"failed (exit {item.error.exit_code}): {item.error.message.removeprefix(f'{item.role}: ')}"
    if item.subject == "rule":
        return f"{item.role:<8} {failed}"
    return f"{item.role:<8} {item.subject}: {failed}"


def sandbox(
    clusters: Annotated[
        int, typer.Option("--clusters", "-n", min=1, max=4, metavar="N", help="How many clusters.")
    ] = 2,
    nodes: Annotated[
        int,
        local_nodes_option(
            "Broker+controller nodes per cluster. 3: a three-voter quorum, replication factor 3, "
            "min.insync.replicas=2, the internal topics replicated too."
        ),
    ] = 1,
    hold: Annotated[
        bool, typer.Option("--hold", help="Keep the clusters running until Ctrl-C (else stop at once).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Start throwaway Apache Kafka clusters on loopback (real brokers, KRaft mode).

    Each cluster has one node, or with --nodes 3 three nodes replicated like a production
    cluster; the bootstrap servers printed list every node. The broker jars come from Maven
    Central the first time (cached in ~/.cache/kafka-backup). Used by the local drill, the tests
    and the benchmarks.

    \b
    Example:
      kafka-backup sandbox -n 2
      kafka-backup sandbox -n 1 --nodes 3 --hold
    """
    json_mode(as_json)
    from kbackup.sandbox.kafka import local_clusters

    names = ["source", "target", "cluster-3", "cluster-4"][:clusters]
    started = time.monotonic()
    with local_clusters(names, nodes=nodes) as running:
        elapsed = time.monotonic() - started
        rows = [
            {
                "name": c.name,
                "bootstrap_servers": c.bootstrap_servers,
                "cluster_id": c.cluster_id,
                "nodes": c.nodes,
            }
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
