"""Searching a template's knobs: the space of valid configs (``space.py``)."""
from .space import sample_config

__all__ = ["sample_config"]
