"""Entry points the master runs inside trial processes."""
