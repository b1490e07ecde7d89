"""``python -m lookback``: the ``lookback`` command (how a background reader is started)."""

import sys

from lookback.cli import main

sys.exit(main())
