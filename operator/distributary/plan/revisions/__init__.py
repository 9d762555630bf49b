"""A revision's life and position: how a change is carried out, positions and lag, progress,
exactly-once markers, cutover."""
