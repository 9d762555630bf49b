"""One StreamJob: what runs it, and its status."""
