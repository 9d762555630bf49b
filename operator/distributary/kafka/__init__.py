"""The Kafka adapter: the only code that talks to Kafka (confluent-kafka)."""
