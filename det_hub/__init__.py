"""det_hub: a deep-learning training platform that lives in JupyterHub."""

__version__ = "0.1.0"

__all__ = ["__version__"]
