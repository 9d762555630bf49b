"""Adapters to the databases at a pipeline's two ends: the sources of change data capture."""
