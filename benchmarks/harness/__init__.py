"""What the benchmarks share: the checkout's root, engine servers on free ports, the Wan-shaped random model and
its calls, event-loop and percentile figures, and the reports they write.

Every script runs as `python benchmarks/<folder>/NAME.py` from the checkout's root. Its one line of set-up puts the
root on `sys.path` (`sys.path.insert(0, str(Path(__file__).resolve().parents[2]))`), so that `studio` and
`benchmarks.harness` import from the same checkout; the rest comes from here.
"""

from __future__ import annotations

from pathlib import Path

# The checkout the benchmarks belong to (the one whose `studio` they measure, unless told otherwise).
ROOT = Path(__file__).resolve().parents[2]
