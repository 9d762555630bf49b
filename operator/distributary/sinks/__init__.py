"""Sinks: serving stores kept equal to logs (`python -m distributary.sinks --spec FILE`)."""
