"""oncelog: a Kafka-wire-compatible broker built around exactly-once semantics."""

__version__ = "0.1.0"
