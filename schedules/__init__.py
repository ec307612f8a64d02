"""Schedule templates per target, their knobs, and dispatch: the first template
for ``(op, target)`` that accepts the workload schedules it."""
from .config import Config, Knob, Split, config_key
from .dispatch import NOT_APPLICABLE, apply, register_template, template_name

# Importing the template modules registers them (specific templates first).
from . import cpu, cuda, generic  # noqa: E402,F401

__all__ = ["Config", "Knob", "NOT_APPLICABLE", "Split", "apply", "config_key", "register_template",
           "template_name"]
