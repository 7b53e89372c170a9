"""``show-offset-mapping`` (also the spark-submit application: kbackup.cli.spark_submit)."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from kbackup.app.overrides import mapping_inputs
from kbackup.cli.common import (
    BootstrapOption,
    ConfigOption,
    JsonOption,
    json_mode,
    load_config,
    pairs,
    print_json,
)
from kbackup.cli.mapping_text import parse_format, render, write_output
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.progress import Progress
from kbackup.format.mapping_file import check_writable_mapping
from kbackup.mapping import build_offset_mapping

#: What a Kafka topic name is made of: anything else in a --topic is a regex or a typo.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _exact_topic(name: str) -> None:
    """A --topic that no topic can be named: refused, as restore's -t (a regex) might suggest it."""
    if not _TOPIC_NAME.fullmatch(name):
        raise ConfigError(
            f"--topic {name!r} is not a topic name: show-offset-mapping scans topics by their exact name "
            "(letters, digits, '.', '_', '-'), it takes no regex as restore's --topic does",
            hint="give each restored topic with its own -t, or --all-topics",
        )


def show_offset_mapping(
    bootstrap_servers: BootstrapOption = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Restored (target) topic to scan, by its exact name, not a regex as restore's -t "
            "(repeatable).",
        ),
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="Scan every topic whose name does not start with '__'.")
    ] = False,
    source_cluster: Annotated[
        str | None,
        typer.Option(
            "--source-cluster-id",
            "--source-cluster",
            metavar="NAME",
            help="Origin cluster id to keep records of (x-kafka-backup-cluster), as backup's "
            "--source-cluster-id stamped it.",
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", metavar="FILE", help="Write the mapping to this file.")
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="text|json|csv|parquet",
            help="text, json, csv or parquet.",
            show_default="the --output file's extension, else text",
        ),
    ] = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            metavar="URL",
            help="Spark master URL.",
            show_default="mapping.spark_master",
        ),
    ] = None,
    kafka_options: Annotated[
        list[str] | None,
        typer.Option(
            "--kafka-option",
            metavar="KEY=VALUE",
            help="Java Kafka client property for Spark's Kafka source, e.g. "
            "ssl.truststore.location=/ca.pem (repeatable; over mapping.kafka_options).",
        ),
    ] = None,
    min_partitions: Annotated[
        int | None,
        typer.Option(
            "--min-partitions",
            min=1,
            metavar="N",
            help="Spark's minPartitions: split large Kafka partitions.",
        ),
    ] = None,
    max_records_per_partition: Annotated[
        int | None,
        typer.Option(
            "--max-records-per-partition", min=1, metavar="N", help="Spark's maxRecordsPerPartition."
        ),
    ] = None,
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            "--connect-timeout",
            min=0.001,
            metavar="SECONDS",
            help="Seconds to reach the target (over the config's).",
        ),
    ] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Scan restored topics' origin headers (a Spark job) into exact source-to-target offset ranges.

    \b
    Example:
      kafka-backup show-offset-mapping -c dr.yaml -t orders -o mapping.json
    """
    json_mode(as_json)
    for name in topic or []:
        _exact_topic(name)
    chosen_format = parse_format(output_format, output)
    if chosen_format == "parquet" and output is None:
        raise UsageError("the parquet format is binary: give --output FILE")
    inputs = mapping_inputs(
        load_config(config),
        bootstrap_servers=bootstrap_servers,
        source_cluster=source_cluster,
        spark_master=spark_master,
        kafka_options=pairs(kafka_options, "--kafka-option", empty_values=True),
        min_partitions=min_partitions,
        max_records_per_partition=max_records_per_partition,
        connect_timeout_secs=connect_timeout,
    )
    if output is not None:
        check_writable_mapping(output)  # a Spark job's result is not lost at its last step
    source = inputs.source_cluster
    with Progress() as progress:
        mapping = build_offset_mapping(
            inputs.connection,
            source_cluster=source,
            topics=topic or [],
            all_topics=all_topics,
            settings=inputs.settings,
            progress=progress,
        )
    stats = mapping.stats
    assert stats is not None
    summary = {
        "source_cluster": source,
        "topics": stats.topics,
        "partitions": stats.partitions,
        "offsets_scanned": stats.offsets_scanned,
        "records_mapped": mapping.records,
        "ranges": len(mapping.ranges),
        "seconds": round(stats.seconds, 2),
        "spark_seconds": round(stats.spark_seconds, 2),
    }
    if output is not None:
        summary.update(
            output=output, format=chosen_format, bytes=write_output(mapping, output, chosen_format)
        )
    if as_json:
        print_json(summary if output is not None else mapping.to_document())
        return
    if output is None:
        typer.echo(render(mapping, chosen_format), nl=False)
    written = f"; wrote {output} ({summary['bytes']} bytes, {chosen_format})" if output is not None else ""
    typer.echo(
        f"scanned {stats.partitions} partition(s) of {stats.topics} topic(s), "
        f"{stats.offsets_scanned} offsets, in {stats.seconds:.1f}s: "
        f"{mapping.records} record(s) of {source} in {len(mapping.ranges)} range(s){written}",
        err=output is None,
    )
