"""Sinks: a table's statements from its Log's schema."""
