"""Sources: their tables' Logs, Debezium connectors and revisions."""
