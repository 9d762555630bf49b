"""The Spark applications that run revisions: their manifests and runner specs, states,
restarts, checkpoints, starting positions refused, and the children a reconcile compares."""
