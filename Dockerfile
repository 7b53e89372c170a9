# kafka-backup: the CLI with a Java 17 runtime (Spark's mapping job runs on the JVM).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kafka-backup
COPY pyproject.toml README.md ./
COPY kbackup ./kbackup
RUN pip install --no-cache-dir . && rm -rf /root/.cache

RUN useradd --create-home --uid 10001 kbackup
USER kbackup
WORKDIR /home/kbackup
ENV KBACKUP_CACHE_DIR=/home/kbackup/.cache/kafka-backup

ENTRYPOINT ["kafka-backup"]
CMD ["--help"]
