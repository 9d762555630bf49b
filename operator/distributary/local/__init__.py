"""Running pipelines on one machine: cached jars, an embedded Kafka broker, the local loop."""
