"""Edits and what they do: of pipeline files, against a cluster, and the records written ahead
of acting on them."""
