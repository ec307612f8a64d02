"""``python -m kiln.cli``: the ``kiln`` command (as ``python -m kiln``)."""
import sys

from . import main

sys.exit(main())
