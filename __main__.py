"""``python -m kiln``: the ``kiln`` command."""
import sys

from .cli import main

sys.exit(main())
