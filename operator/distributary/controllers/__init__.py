"""The operator: kopf handlers, one module per kind, and what the operator gives the one
reconcile of views and jobs (`reconcile/`): its status in the API server, its events, its
namespace as kopf's indexes hold it (`handling.py`), and services built once (`services.py`).

A handler only orchestrates. What to do is decided by the pure planners in `plan/`; Kafka is
reached through `kafka/` and `backends/`, blocking calls run in a thread so one slow broker does
not stall the event loop; and what happened is written to status as `plan/` computes it.
"""
