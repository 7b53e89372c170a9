"""Names shared by every layer for the plain values Kafka work passes around."""

from __future__ import annotations

#: A partition of a topic: ``(topic, partition)``. Source or target side is said by the variable's name.
TopicPartitionKey = tuple[str, int]
