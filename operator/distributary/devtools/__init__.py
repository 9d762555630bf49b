"""Test beds for developers: the local Kubernetes control plane and the like. Not an adapter:
nothing the operator runs in production imports it."""
