# kafka-backup: the CLI with a Java 17 runtime (Spark's mapping job runs on the JVM).
#   docker build -t kafka-backup .
#   docker run --rm -v "$PWD:/work" -w /work kafka-backup backup -c backup.yaml
# Checked without a Docker engine by tests/unit/test_dockerfile.py.
FROM python:3.11-slim-bookworm

# Java 17 for PySpark (the mapping and audit phases of three-phase-restore, show-offset-mapping);
# nothing else from apt.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The same package and console script as `pip install .` on a workstation.
WORKDIR /opt/kafka-backup
COPY pyproject.toml README.md ./
COPY kbackup ./kbackup
# kbackup/docs links to docs/: the package carries these pages (kafka-backup docs TOPIC).
COPY docs/*.md ./docs/
RUN pip install --no-cache-dir . && rm -rf /root/.cache

# Never run as root; uid 10001 is what examples/k8s-backup-cronjob.yaml expects.
RUN useradd --create-home --uid 10001 kbackup
USER kbackup
WORKDIR /home/kbackup
# Spark's Kafka source is resolved into this cache on first use (mount a volume to keep it).
ENV KBACKUP_CACHE_DIR=/home/kbackup/.cache/kafka-backup

ENTRYPOINT ["kafka-backup"]
CMD ["--help"]
