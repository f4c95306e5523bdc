"""Set-up for the deploy checks: `deploycheck` (tool lookup, PromQL name checks) importable."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
