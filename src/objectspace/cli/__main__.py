"""``python -m objectspace.cli``: the ``objectspace`` command."""

from __future__ import annotations

import sys

from objectspace.cli import main

sys.exit(main())
