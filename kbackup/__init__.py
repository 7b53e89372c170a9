"""kafka-backup: back up Kafka topics to Parquet, restore them, and move consumer groups exactly."""

__version__ = "0.1.0"
