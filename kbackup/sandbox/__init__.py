"""Throwaway local services (real Apache Kafka brokers) for tests, the local drill and benchmarks."""
