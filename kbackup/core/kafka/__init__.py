"""confluent-kafka, wrapped in one place: the only package that imports it (ruff's banned-api rule)."""
