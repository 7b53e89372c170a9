"""Offset ranges and translation: pure functions, no Kafka, no Spark, no storage."""
