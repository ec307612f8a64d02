"""The one version constant: packaging reads it (pyproject.toml), kernel-cache
keys, tuning records and exported modules carry it."""
__version__ = "0.1.0"
