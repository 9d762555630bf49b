"""One DerivedView: what to create for it, and its status."""
