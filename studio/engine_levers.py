"""The values of the embedded engine's levers that more than its settings name: the step cache's modes, the
quantization modes and the previews' interval. The engine's settings (studio/settings/engine.py), the wire contract
(protocol.py: a request's own step cache) and the code that pulls each lever (engine/step_cache.py, engine/gpu/fp8.py,
engine/previews.py) read them here. It imports nothing, so that each of those may import it.
"""

from __future__ import annotations

from typing import Literal

# Fewer transformer calls per video: off computes every step; reuse and taylor estimate the skipped ones.
StepCacheName = Literal["off", "reuse", "taylor"]
# The transformer's matmuls: none keeps them in bf16; fp8 quantizes the blocks' linear layers.
QuantizationName = Literal["none", "fp8"]
# The least seconds between two previews of one job.
DEFAULT_PREVIEW_INTERVAL_S = 0.5
