"""``show-offset-mapping``."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from kbackup.cli.common import BootstrapOption, ConfigOption, JsonOption, load_config, not_built_yet

MappingFormat = Literal["text", "json", "csv", "parquet"]


def show_offset_mapping(
    bootstrap_servers: BootstrapOption = None,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="Restored topic to scan (repeatable).")
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="Scan every topic with origin headers.")
    ] = False,
    source_cluster: Annotated[
        str | None, typer.Option("--source-cluster", help="Origin cluster id to keep records of.")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write the mapping to this file.")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="text, json, csv or parquet.")] = "text",
    spark_master: Annotated[str | None, typer.Option("--spark-master", help="Spark master URL.")] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Scan restored topics' origin headers (a Spark job) into exact source-to-target offset ranges."""
    load_config(config)
    raise not_built_yet("show-offset-mapping")
