"""Distributary: logs, derived views and stream jobs on Kafka and Spark, declared as resources."""

__version__ = "0.1.0"
