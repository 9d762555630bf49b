"""How clients reach a secured Kafka, and the Secrets Spark's pods are given for it."""
