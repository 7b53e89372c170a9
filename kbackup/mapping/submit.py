"""The mapping job as a ``spark-submit`` application, for running it on a Spark cluster.

    spark-submit --master spark://spark-master:7077 \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \\
      "$(python -c 'import kbackup.mapping.submit as m; print(m.__file__)')" \\
      --bootstrap-servers target-kafka:9092 --all-topics \\
      --source-cluster prod-us-east-1 --output mapping.json

A target behind SASL or TLS: ``--config restore.yaml`` takes the ``target``
connection (security settings and secrets, read from the file and the
environment, never from the command line) and the ``mapping`` settings from a
kafka-backup config file, as ``kafka-backup show-offset-mapping -c`` does.

Master, packages and resources come from ``spark-submit`` (or
``spark-defaults.conf``) as for any Spark application; this script only
takes what the mapping needs. It runs on the driver, which needs
kafka-backup installed (it reads the target's offsets with confluent-kafka);
executors need pyarrow and pandas (PySpark's Arrow support), not
kafka-backup. See docs/mapping.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kbackup import config as config_module
from kbackup.core.errors import KBackupError, UsageError
from kbackup.core.secrets import redact
from kbackup.mapping.build import build_offset_mapping, mapping_inputs
from kbackup.mapping.mapping_file import FORMATS, parse_format, render, write_mapping


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def parser() -> argparse.ArgumentParser:
    args = argparse.ArgumentParser(
        prog="kbackup.mapping.submit",
        description="Scan restored topics' origin headers into exact source-to-target offset ranges.",
    )
    args.add_argument(
        "--config",
        "-c",
        help="kafka-backup config file: its target connection (SASL/TLS included) and mapping settings",
    )
    args.add_argument(
        "--bootstrap-servers", "-b", help="host:port[,host:port] of the target (default: the config's target)"
    )
    topics = args.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", "-t", action="append", help="target topic to scan (repeatable)")
    topics.add_argument("--all-topics", action="store_true", help="every topic not starting with '__'")
    args.add_argument(
        "--source-cluster", help="origin cluster id (x-kafka-backup-cluster; default: from the config)"
    )
    args.add_argument("--output", "-o", help="mapping file to write (default: print to stdout)")
    args.add_argument("--format", choices=FORMATS, help="default: the output's extension, else text")
    args.add_argument(
        "--kafka-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Java Kafka client property for Spark's Kafka source, e.g. ssl.truststore.location=/ca.pem",
    )
    args.add_argument("--min-partitions", type=int, help="Spark's minPartitions: split large partitions")
    args.add_argument("--max-records-per-partition", type=int, help="Spark's maxRecordsPerPartition")
    args.add_argument("--connect-timeout", type=float, default=15.0, help="seconds to reach the target")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    from pyspark.sql import SparkSession

    try:
        output_format = parse_format(options.format, options.output)
        if output_format == "parquet" and not options.output:
            raise UsageError("the parquet format is binary: give --output FILE")
        cfg = config_module.load(options.config) if options.config else config_module.KBackupConfig()
        connection, source_cluster = mapping_inputs(
            cfg,
            bootstrap_servers=options.bootstrap_servers,
            source_cluster=options.source_cluster,
            connect_timeout_secs=options.connect_timeout,
        )
        settings = cfg.mapping.model_copy(
            update={
                "kafka_options": {**cfg.mapping.kafka_options, **dict(options.kafka_option)},
                "min_partitions": options.min_partitions or cfg.mapping.min_partitions,
                "max_records_per_partition": (
                    options.max_records_per_partition or cfg.mapping.max_records_per_partition
                ),
            }
        )
        owned = SparkSession.getActiveSession() is None
        spark = SparkSession.builder.appName("kafka-backup-mapping").getOrCreate()
        try:
            mapping = build_offset_mapping(
                connection,
                source_cluster=source_cluster,
                topics=options.topic or [],
                all_topics=options.all_topics,
                settings=settings,
                spark=spark,
            )
        finally:
            if owned:
                spark.stop()
        if options.output:
            size = write_mapping(mapping, options.output, output_format)
            ranges, records = len(mapping.ranges), mapping.records
            print(f"wrote {options.output} ({size} bytes): {ranges} ranges, {records} records")
        else:
            sys.stdout.write(render(mapping, output_format))
    except KBackupError as exc:
        print(redact(f"kbackup.mapping.submit: error: {exc.message}"), file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
