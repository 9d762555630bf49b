"""Topics: what to make or refuse for a Log, and who owns each."""
