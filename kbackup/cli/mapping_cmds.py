"""``show-offset-mapping``."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, json_mode, load_config, print_json
from kbackup.core.errors import UsageError
from kbackup.core.progress import Progress
from kbackup.mapping import build_offset_mapping, render, write_mapping
from kbackup.mapping.build import mapping_inputs
from kbackup.mapping.mapping_file import parse_format


def show_offset_mapping(
    bootstrap_servers: BootstrapOption = None,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="Restored (target) topic to scan (repeatable).")
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="Scan every topic whose name does not start with '__'.")
    ] = False,
    source_cluster: Annotated[
        str | None,
        typer.Option(
            "--source-cluster", help="Origin cluster id to keep records of (x-kafka-backup-cluster)."
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write the mapping to this file.")
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="text, json, csv or parquet (default: the --output file's extension, else text).",
            show_default=False,
        ),
    ] = None,
    spark_master: Annotated[
        str | None, typer.Option("--spark-master", help="Spark master URL (default: mapping.spark_master).")
    ] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Scan restored topics' origin headers (a Spark job) into exact source-to-target offset ranges."""
    json_mode(as_json)
    cfg = load_config(config)
    connection, source = mapping_inputs(
        cfg, bootstrap_servers=bootstrap_servers, source_cluster=source_cluster
    )
    chosen_format = parse_format(output_format, output)
    if chosen_format == "parquet" and output is None:
        raise UsageError("the parquet format is binary: give --output FILE")
    settings = cfg.mapping
    if spark_master:
        settings = settings.model_copy(update={"spark_master": spark_master})

    with Progress() as progress:
        mapping = build_offset_mapping(
            connection,
            source_cluster=source,
            topics=topic or [],
            all_topics=all_topics,
            settings=settings,
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
            output=output, format=chosen_format, bytes=write_mapping(mapping, output, chosen_format)
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
