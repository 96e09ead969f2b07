"""Which requests can share one denoising loop, and the batch sizes the transformer runs at."""

from __future__ import annotations

from studio.engine.generation_types import GenerationParams
from studio.engine.loader import PipelineFacts


def batch_key(facts: PipelineFacts, params: GenerationParams) -> tuple | None:
    """Requests with equal keys can share one denoising loop; None: this request runs alone."""
    if not facts.batched_loop or any(k in facts.call_parameters for k in params.extra):
        return None
    return (
        facts.native_size(params.width, params.height),
        params.num_frames,
        params.num_inference_steps,
        float(params.guidance_scale),
        params.flow_shift,
        params.step_cache,  # a batch shares one schedule of computed steps
    )


class BatchBuckets:
    """Batch sizes the transformer runs at when shapes are static (a compiled transformer): a batch is padded
    up to the next of them, so that only a few shapes are ever compiled and captured."""

    def __init__(self) -> None:
        self.sizes: list[int] = [2**i for i in range(7)]

    def set_max_batch(self, max_batch: int) -> None:
        """Powers of two below max_batch, and it."""
        self.sizes = sorted({*(2**i for i in range(max_batch.bit_length()) if 2**i < max_batch), max_batch})

    def padded(self, count: int, static_shapes: bool) -> int:
        """The batch size `count` requests run at."""
        if not static_shapes:
            return count
        return next((size for size in self.sizes if size >= count), count)
