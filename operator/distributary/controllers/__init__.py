"""The operator: kopf handlers, one module per kind, that observe, plan, act and record.

A handler only orchestrates. What to do is decided by the pure planners in `plan/`; Kafka is
reached through `kafka/` and `backends/`, blocking calls run in a thread so one slow broker does
not stall the event loop; and what happened is written to status as `plan/` computes it.
"""
