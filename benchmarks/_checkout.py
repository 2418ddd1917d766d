"""Puts this checkout's root first on ``sys.path``, so a benchmark measures the fnarray beside it.

Run as a script, Python puts ``benchmarks/`` first on ``sys.path``, not the checkout: an installed fnarray (another
checkout's editable install, say) would be imported and measured instead. Every benchmark imports this module
before ``fnarray``.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
