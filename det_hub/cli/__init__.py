"""The `det-hub` command line; the entry point is :func:`det_hub.cli.main.main`."""
