"""Stage 1, backup: Kafka topics to versioned Parquet on object storage."""
