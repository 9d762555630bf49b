"""Status as the API server keeps it: conditions, events, merge patches."""
