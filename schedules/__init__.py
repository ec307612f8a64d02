"""Schedule templates per target, their knobs, and dispatch ``(op, target) -> template``."""
from .config import Config, Knob, Split, config_key
from .dispatch import lookup, register_template, template_name

# Importing the template modules registers them (specific templates first).
from . import cpu, cuda, generic  # noqa: E402,F401

__all__ = ["Config", "Knob", "Split", "config_key", "lookup", "register_template", "template_name"]
