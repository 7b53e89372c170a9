"""The mapping job as a ``spark-submit`` application: ``kafka-backup show-offset-mapping`` in the driver.

    spark-submit --master spark://spark-master:7077 \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \\
      "$(python -c 'import kbackup.cli.spark_submit as m; print(m.__file__)')" \\
      --bootstrap-servers target-kafka:9092 --all-topics \\
      --source-cluster-id prod-us-east-1 --output mapping.json

It takes exactly the options of ``kafka-backup show-offset-mapping`` (``--config`` for a target
behind SASL or TLS, secrets from the file and the environment, never the command line), goes
through the same parser and the same error handler, and exits with the same codes. Spark's
master, packages and resources come from ``spark-submit`` (or ``spark-defaults.conf``), as for any
Spark application. The driver needs kafka-backup installed (it reads the target's offsets with
confluent-kafka); executors need pyarrow and pandas, not kafka-backup. See docs/mapping.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kbackup.cli.main import run


def main(argv: Sequence[str] | None = None) -> int:
    return run(["show-offset-mapping", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
