"""Print the hostile-input corpus's table by family and outcome (``hostile/``, run by
``test_hostile_inputs.py``):

    python tests/cli/hostile_corpus.py [--all] [-k NAME]

the fast subset the default tests run, or with ``--all`` every case; ``-k`` keeps the cases
whose ``family/name`` contains NAME. Exits 1 if any run fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hostile_runner import main

    sys.exit(main(sys.argv[1:]))
