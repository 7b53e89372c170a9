"""Where the mapping scan's time goes: Spark's Kafka source alone, the JVM header projection, the
scan's first pass (a JVM-only aggregation), the exact mapInArrow path (its second pass, for gappy
partitions only), and the mapping scan itself, each beside Kafka's ConsumerPerformance.

    .venv/bin/python -m bench.mapping_breakdown [--records 2000000] [--rounds 2]

Not a docs writer: it prints (docs/mapping.md says what it is for and keeps no
figure of it, as no table of it is written). One throwaway
local broker, one topic of hole-free restored records (2 partitions), one
local[2] Spark session; every step reads the same partitions, alternating
with ConsumerPerformance so that load changes hit both.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from bench.bench_mapping import SOURCE_CLUSTER, consumer_performance, fill, mapping_scan
from kbackup.format.mapping_file import ScannedPartition
from kbackup.mapping.job import exact_scan, first_pass, read_options, restored_records
from kbackup.mapping.spark_session import build_spark_session
from kbackup.sandbox.kafka import local_clusters


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    records, partitions = args.records, 2
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()}", flush=True)
    with local_clusters(["mapping-breakdown"]) as (cluster,):
        topic = "restored"
        print(f"filled {records:,} records in {fill(cluster, topic, records, partitions):.1f} s", flush=True)
        spark = build_spark_session("local[2]")
        from pyspark.sql import functions as F

        shares = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
        scanned = [ScannedPartition(topic, p, 0, shares[p]) for p in range(partitions)]
        options = read_options({"kafka.bootstrap.servers": cluster.bootstrap_servers}, scanned)

        def source_only() -> object:
            reader = spark.read.format("kafka")
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load().select("offset").agg(F.count("*")).collect()[0][0]

        def projection() -> object:
            return restored_records(spark, options, SOURCE_CLUSTER).agg(F.count("*")).collect()[0][0]

        def first_pass_alone() -> object:
            # The product's first pass alone: groups collected, read on the driver, no planning.
            found = first_pass(spark, options, SOURCE_CLUSTER)
            return f"{found.task_rows} groups, gappy partitions: {len(found.groups.gappy_targets)}"

        def exact_path() -> object:
            # What the scan was before the first pass, and what gappy partitions still take.
            return len(exact_scan(spark, options, SOURCE_CLUSTER).ranges)

        steps: list[tuple[str, Callable[[], object]]] = [
            ("Spark's Kafka source alone (count, headers on)", source_only),
            ("+ JVM origin-header projection (count)", projection),
            ("+ first pass: JVM aggregation by offset difference", first_pass_alone),
            ("exact path alone (mapInArrow range builder, the second pass)", exact_path),
            (
                "mapping scan (build_offset_mapping: plan + first pass)",
                lambda: mapping_scan(spark, cluster, topic).ranges,
            ),
        ]
        for round_number in range(1, args.rounds + 1):
            perf = consumer_performance(cluster, topic, records)
            print(
                f"round {round_number}: ConsumerPerformance {perf.records_per_sec:,.0f} records/s", flush=True
            )
            for name, step in steps:
                started = time.monotonic()
                result = step()
                rate = records / (time.monotonic() - started)
                print(
                    f"  {name}: {rate:,.0f} records/s, {rate / perf.records_per_sec:.2f} of "
                    f"ConsumerPerformance ({result})",
                    flush=True,
                )
        spark.stop()


if __name__ == "__main__":
    main()
