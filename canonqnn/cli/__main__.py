"""``python -m canonqnn.cli``: the ``canonqnn`` command."""

import sys

from . import main

sys.exit(main())
