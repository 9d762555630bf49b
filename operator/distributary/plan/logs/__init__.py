"""A Log's status (with what Strimzi reports of its KafkaTopic), and what deleting one deletes:
the pure halves of the Log controller."""
