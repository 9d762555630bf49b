"""Backends: where the planners' actions are carried out.

A topic backend turns a topic plan into Kafka topics: `direct` through Kafka's Admin API (used by
`distributary run` and clusters without Strimzi), `strimzi` by emitting `KafkaTopic` resources.
A Spark runtime runs the runner: `spark-operator` or `local`. Backends sit above the adapters
(`kafka`, `kube`) and below whatever orchestrates them (controllers, the local loop), so the
choice of backend is made in one place and the planners never know it.
"""
