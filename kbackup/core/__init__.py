"""Shared core: errors, config, the Kafka client wrapper, logging, progress. Never imports typer."""
