"""`VideoGenerator`: one diffusers text-to-video pipeline on one device, making one batch of videos at a time.

Wan-style pipelines run through the engine's own batched denoising loop (studio.engine.denoise), with text
embeddings cached and, on a GPU, the transformer set up for speed (studio.engine.gpu_setup: the engine's
kernels, compiled blocks for static shapes, CUDA graphs per warmed shape); the VAE decodes one latent frame at
a time and hands the frames over for encoding as it goes (studio.engine.vae_decode). Any other pipeline runs
through its plain `__call__`, one request at a time (studio.engine.plain_call). On a GPU everything that runs
the model runs on one device thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from studio.engine import batching, warmup
from studio.engine.batching import BatchBuckets
from studio.engine.denoise import BatchedDenoiser, TransformerForward
from studio.engine.device_thread import DeviceThread
from studio.engine.generation import BatchItem, GenerationOutput, GenerationParams, ResultCallback
from studio.engine.gpu_setup import GpuSetup
from studio.engine.loader import PipelineFacts, from_pretrained, set_up_device
from studio.engine.plain_call import generate_plain
from studio.engine.prompts import PromptEmbeddings

log = logging.getLogger(__name__)


class VideoGenerator:
    """Owns one diffusers pipeline on one device and runs one batch of generations at a time."""

    def __init__(
        self,
        model: str,
        device: str = "auto",
        threads: int | None = None,
        compile: str = "auto",
        compile_mode: str | None = None,
        attention_backend: str = "auto",
        text_cache_size: int = 64,
        cuda_graphs: bool = True,
        fused_kernels: bool = True,
        tune_kernels: bool = True,
    ):
        self.model = model
        self.device, self.dtype = set_up_device(device, threads)
        self.threads = threads or 0  # 0: no budget (torch and the encoder use every core)
        self.gpu = GpuSetup(
            self.device, compile, compile_mode, attention_backend, cuda_graphs, fused_kernels, tune_kernels
        )
        self.prompts = PromptEmbeddings(text_cache_size)
        self.buckets = BatchBuckets()
        self.pipe: Any = None
        self.facts: PipelineFacts | None = None  # read off the pipeline at load
        self.vae_channels_last: bool | None = None  # decided by measurement at warm-up on a GPU
        self.warmup_seconds: dict[str, float] = {}
        self._denoise: BatchedDenoiser | None = None
        self._device_thread = DeviceThread(self.device == "cuda")

    @property
    def batched_loop(self) -> bool:
        """Whether the engine's own (batching) denoising loop drives this pipeline."""
        return self.facts is not None and self.facts.batched_loop

    def on_device_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._device_thread.run(fn, *args)

    # --- loading -----------------------------------------------------------------------------------------

    def load(self, pipeline: Any = None) -> None:
        """Load the pipeline from `model`, or take one already built (its modules are moved to the device)."""
        self.on_device_thread(self._load, pipeline)

    def _load(self, pipeline: Any = None) -> None:
        started = time.perf_counter()
        if pipeline is not None:
            self.pipe, source = pipeline, type(pipeline).__name__
        else:
            self.pipe, source = from_pretrained(self.model, self.dtype)
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self.facts = PipelineFacts.of(self.pipe)
        forward = TransformerForward(self.pipe)
        if self.device == "cuda" and self.facts.batched_loop:
            self.gpu.apply(self.pipe, forward, self.dtype)
        self._denoise = BatchedDenoiser(
            self.pipe, self.facts, self.device, self.prompts, self.buckets, self.gpu, forward
        )
        log.info(
            "loaded %s (%s) on %s in %.1f s (batched loop %s, compile %s, attention %s)",
            source,
            type(self.pipe).__name__,
            self.device,
            time.perf_counter() - started,
            "on" if self.batched_loop else "off",
            self.gpu.compile if self.device == "cuda" else "off",
            self.gpu.attention_backend or "default",
        )

    # --- shapes ------------------------------------------------------------------------------------------

    def native_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the model can make: each side rounded up to the model's multiple."""
        return self._loaded_facts().native_size(width, height)

    def batch_key(self, params: GenerationParams) -> tuple | None:
        """Requests with equal keys can share one denoising loop; None: this request runs alone."""
        return batching.batch_key(self.facts, params) if self.facts is not None else None

    def set_max_batch(self, max_batch: int) -> None:
        """Batch sizes the transformer runs at when shapes are static: powers of two below max_batch, and it."""
        self.buckets.set_max_batch(max_batch)

    def _loaded_facts(self) -> PipelineFacts:
        if self.facts is None:
            raise RuntimeError("pipeline not loaded")
        return self.facts

    # --- running -----------------------------------------------------------------------------------------

    def generate(
        self,
        params: GenerationParams,
        on_step: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> GenerationOutput:
        """Run one request; `on_step(done, total)` after each step; `should_stop()` cancels at the next step."""
        results: list[GenerationOutput | BaseException] = []
        self.generate_batch([BatchItem(params, on_step, should_stop)], lambda _, result: results.append(result))
        result = results[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def generate_batch(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        """Run requests of one batch key together; `on_result(i, output or exception)` once per item, as soon
        as that item is done (on a GPU, from the device thread). A cancelled item is answered at once and the
        others go on."""
        self.on_device_thread(self._generate_batch_here, items, on_result)

    def _generate_batch_here(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        if self.pipe is None or self.facts is None or self._denoise is None:
            raise RuntimeError("pipeline not loaded")
        if not items:
            return
        if len(items) > 1:
            keys = {self.batch_key(item.params) for item in items}
            if None in keys or len(keys) != 1:
                raise ValueError("generate_batch needs requests with one batch key")
        if self.batch_key(items[0].params) is None:
            item = items[0]
            try:
                result: GenerationOutput | BaseException = generate_plain(
                    self.pipe, self.facts, self.device, item.params, item.on_step, item.should_stop
                )
            except Exception as exc:
                result = exc
            on_result(0, result)
            return
        self._denoise(items, on_result)

    # --- start-up ----------------------------------------------------------------------------------------

    def warmup(self, sizes: Sequence[tuple[int, int, int]], max_batch: int = 1) -> dict[str, float]:
        """Run each size (width, height, frames) once at each batch size the transformer and the VAE will see
        (the batch buckets up to max_batch), so that no request waits for a compile. Returns the seconds each
        run took."""
        return self.on_device_thread(warmup.warm_up, self, sizes, max_batch)

    def fall_back_to_eager(self) -> None:
        """The transformer as diffusers wrote it (no compile, kernels, attention backend or CUDA graphs)."""
        self.gpu.fall_back_to_eager(self.pipe)
