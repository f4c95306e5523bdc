"""Test set-up for tests/collector: makes the `kineto_builder` helper module importable.

pytest runs with `--import-mode=importlib`, which puts no test folder on sys.path; this one
adds its own folder, as tests/conftest.py does for tests/.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
