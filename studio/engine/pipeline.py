"""Loading a diffusers text-to-video pipeline and running it with per-step progress and cancel.

Wan-style pipelines (a text encoder, one transformer, a scheduler and a VAE) run through the engine's own
denoising loop: several requests of one shape share each transformer call (with the conditional and
unconditional halves of classifier-free guidance in the same batch), text embeddings are cached, and on a
GPU the engine's own kernels go into a Wan transformer (studio.engine.kernels, once a forward with them matches
one without), the transformer's blocks are compiled for static shapes (a batch is padded up to the next of a few batch
sizes), warmed at start-up and then captured as CUDA graphs, one per shape; the VAE decodes one latent frame at
a time and hands the frames over for encoding as it goes; and everything that runs the model runs on one
device thread. Any other pipeline runs through its plain `__call__`, one request at a time.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studio.engine.allocator import keep_freed_blocks
from studio.engine.graphs import GraphedForward

log = logging.getLogger(__name__)

# Pixel-frames (frames x height x width) one VAE decode call may take when a batch decodes together: eight
# 33-frame 320x192 videos; a 33-frame 832x480 video is decoded alone.
DECODE_PIXEL_BUDGET = 8 * 33 * 320 * 192
# Steps of a warm-up run: enough for the scheduler's second-order updates to run once.
WARMUP_STEPS = 4
# The engine's kernels change only the order of a few roundings: a forward with them must match the plain one to
# within this share of its largest output value.
MAX_KERNEL_DIFFERENCE = 0.02


class GenerationCancelled(Exception):
    """Raised from the step callback: unwinds the denoising loop at once, skipping the VAE decode."""


class ModelLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class GenerationParams:
    prompt: str
    width: int
    height: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    seed: int
    negative_prompt: str | None = None
    flow_shift: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationOutput:
    frames: np.ndarray  # uint8 (T, H, W, 3) at the requested size
    native_size: tuple[int, int]  # (width, height) the model made before any resize
    inference_time_s: float
    stage_durations: dict[str, float]
    peak_memory_mb: float | None
    batch_size: int = 1


@dataclass
class BatchItem:
    """One request of a batch: its parameters, its progress callback and its own cancel flag."""

    params: GenerationParams
    on_step: Callable[[int, int], None] | None = None
    should_stop: Callable[[], bool] | None = None
    # Given the video's uint8 frames (t, H, W, 3) at the requested size, a few at a time as the VAE decodes them
    # (the engine's own loop only), so that encoding can run beside the decode. The result still has them all.
    on_frames: Callable[[np.ndarray], None] | None = None


# Called once per item of a batch, as soon as that item is finished: its output, or the exception that ended
# it (GenerationCancelled for a cancelled one).
ResultCallback = Callable[[int, "GenerationOutput | BaseException"], None]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was asked for, but torch sees no CUDA GPU")
    return device


def looks_like_local_path(model: str) -> bool:
    return model.startswith(("/", ".", "~")) or Path(model).exists()


def register_project_pipelines() -> None:
    """Make the project's own pipeline classes (its small default model) known to diffusers by name, which
    `DiffusionPipeline.from_pretrained` needs before it reads a model_index.json that names one of them."""
    try:
        importlib.import_module("studio.smallmodel")
    except ModuleNotFoundError as exc:
        if exc.name != "studio.smallmodel":
            raise


def parse_sizes(text: str) -> list[tuple[int, int, int]]:
    """`"320x192x33,832x480x33"` -> [(320, 192, 33), (832, 480, 33)] (width x height x frames)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            width, height, frames = (int(value) for value in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"a warm-up size looks like WIDTHxHEIGHTxFRAMES (e.g. 320x192x33), got {part!r}") from None
        sizes.append((width, height, frames))
    return sizes


class PipelineRunner:
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
        self.device = resolve_device(device)
        self.dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.threads = threads or 0  # 0: no budget (torch and the encoder use every core)
        if self.device == "cpu":
            keep_freed_blocks()
        if threads:
            torch.set_num_threads(threads)
        if compile == "auto":
            compile = "blocks" if self.device == "cuda" else "off"
        if compile not in ("off", "blocks", "full"):
            raise ValueError(f"compile must be auto, off, blocks or full, got {compile!r}")
        self.compile = compile
        self.compile_mode = compile_mode or None
        self.attention_backend_setting = attention_backend
        self.attention_backend: str | None = None  # what was applied (a diffusers backend name)
        self.text_cache_size = text_cache_size
        self.cuda_graphs = cuda_graphs and self.device == "cuda"
        self.graphs: GraphedForward | None = None  # the transformer's forward, replayed as CUDA graphs
        self.fused_kernels = fused_kernels and self.device == "cuda"
        self.kernels: dict[str, int] = {}  # the engine's kernels put into the transformer, by kind
        self.tune_kernels = tune_kernels and self.device == "cuda"
        self._installed_kernels: Any = None
        self.pipe: Any = None
        self.call_parameters: set[str] = set()
        self.size_multiple = 16
        self.default_scheduler_config: dict[str, Any] = {}
        self.batched_loop = False  # whether the engine's own (batching) denoising loop drives this pipeline
        self.max_sequence_length = 512
        self.warmup_seconds: dict[str, float] = {}
        self.static_shapes = False  # pad batches to `batch_buckets` (set when the transformer is compiled)
        self.fused_qkv = False
        self.vae_channels_last: bool | None = None  # decided by measurement at warm-up on a GPU
        self.batch_buckets: list[int] = [2**i for i in range(7)]
        self._text_cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        # On a GPU every call that runs the model runs on this one thread: cuDNN keeps its chosen kernels per
        # thread, so kernels timed at warm-up on another thread would be timed again by the first request.
        self._device_thread = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-device") if self.device == "cuda" else None
        )
        self._device_thread_id = (
            self._device_thread.submit(threading.get_ident).result() if self._device_thread else None
        )

    # --- loading -----------------------------------------------------------------------------------------

    def _on_device_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._device_thread is None or threading.get_ident() == self._device_thread_id:
            return fn(*args)
        return self._device_thread.submit(fn, *args).result()

    def load(self, pipeline: Any = None) -> None:
        """Load the pipeline from `model`, or take one already built (its modules are moved to the device)."""
        self._on_device_thread(self._load, pipeline)

    def _load(self, pipeline: Any = None) -> None:
        started = time.perf_counter()
        if pipeline is not None:
            self.pipe, source = pipeline, type(pipeline).__name__
        else:
            self.pipe, source = self._from_pretrained()
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        signature = inspect.signature(self.pipe.__call__).parameters
        self.call_parameters = set(signature)
        max_len = signature.get("max_sequence_length")
        if max_len is not None and isinstance(max_len.default, int):
            self.max_sequence_length = max_len.default
        self.size_multiple = self._size_multiple()
        self.default_scheduler_config = dict(self.pipe.scheduler.config)
        self.batched_loop = self._supports_batched_loop()
        if self.device == "cuda":
            self._configure_gpu()
        log.info(
            "loaded %s (%s) on %s in %.1f s (batched loop %s, compile %s, attention %s)",
            source,
            type(self.pipe).__name__,
            self.device,
            time.perf_counter() - started,
            "on" if self.batched_loop else "off",
            self.compile if self.device == "cuda" else "off",
            self.attention_backend or "default",
        )

    def _from_pretrained(self) -> tuple[Any, str]:
        from diffusers import DiffusionPipeline

        if looks_like_local_path(self.model):
            path = Path(self.model).expanduser()
            if not (path / "model_index.json").is_file():
                raise ModelLoadError(
                    f"model directory {str(path)!r} not found or not a diffusers pipeline (no model_index.json)"
                )
            source = str(path)
        else:
            source = self.model  # a hub id: downloads where a network exists
        register_project_pipelines()
        try:
            return DiffusionPipeline.from_pretrained(source, torch_dtype=self.dtype), source
        except Exception as exc:  # surfaced to the user as the server's start-up error
            raise ModelLoadError(f"could not load pipeline {source!r}: {exc}") from exc

    def _supports_batched_loop(self) -> bool:
        pipe = self.pipe
        needed = ("transformer", "vae", "scheduler", "text_encoder", "tokenizer", "encode_prompt", "prepare_latents")
        if not all(getattr(pipe, name, None) is not None for name in needed):
            return False
        if type(pipe).__name__ != "WanPipeline" or getattr(pipe, "transformer_2", None) is not None:
            return False
        config = pipe.config
        if config.get("boundary_ratio") is not None or config.get("expand_timesteps"):
            return False
        vae_config = pipe.vae.config
        return all(hasattr(vae_config, name) for name in ("latents_mean", "latents_std", "z_dim"))

    def _configure_gpu(self) -> None:
        """bf16 is set at load; here: one projection for q, k and v, the fastest attention kernel, and the
        transformer compiled (its repeated blocks, or whole) for static shapes: a graph per size and batch
        bucket, no dynamic-shape kernels."""
        if not self.batched_loop:
            return
        transformer = self.pipe.transformer
        if hasattr(transformer, "fuse_qkv_projections"):
            try:
                transformer.fuse_qkv_projections()
                self.fused_qkv = True
            except ValueError as exc:  # a model with added K/V projections
                log.info("q/k/v projections stay apart: %s", exc)
        backend = self.attention_backend_setting
        if backend == "auto":
            backend = self._fastest_attention_backend()
        if backend and backend != "default" and hasattr(transformer, "set_attention_backend"):
            transformer.set_attention_backend(backend)
            self.attention_backend = backend
        if self.fused_kernels:
            self._install_kernels()
        if self.cuda_graphs:
            self.graphs = GraphedForward(self._transformer_forward)
        if self.compile == "off":
            return
        import torch._dynamo

        torch._dynamo.config.automatic_dynamic_shapes = False
        if self.tune_kernels:
            import torch._inductor.config

            # Each fused kernel's block sizes are timed when it compiles: a longer warm-up, slightly faster kernels.
            torch._inductor.config.coordinate_descent_tuning = True
        for name in ("recompile_limit", "cache_size_limit"):  # one graph per (size, bucket)
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
        if self.compile == "blocks" and getattr(transformer, "_repeated_blocks", None):
            transformer.compile_repeated_blocks(fullgraph=True, mode=self.compile_mode)
        else:
            self.pipe.transformer = torch.compile(transformer, mode=self.compile_mode)
        self.static_shapes = True

    def _install_kernels(self) -> None:
        """Put the engine's kernels (studio.engine.kernels) into the transformer, if one forward on a small
        input with them matches the forward without them; else leave it as it was."""
        from studio.engine import kernels

        sdpa = {None: "default", "_native_cudnn": "cudnn", "_native_flash": "flash", "_native_efficient": "efficient"}
        if type(self.pipe.transformer).__name__ != "WanTransformer3DModel" or self.attention_backend not in sdpa:
            return
        transformer = self.pipe.transformer
        inputs = _small_transformer_inputs(transformer, self.device)
        installed = None
        try:
            with torch.inference_mode():
                expected = transformer(**inputs, return_dict=False)[0].float()
                installed = kernels.install(transformer, sdpa[self.attention_backend])
                actual = transformer(**inputs, return_dict=False)[0].float()
            difference = ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()
            if not difference <= MAX_KERNEL_DIFFERENCE:
                raise RuntimeError(f"the forward with them differs by {difference:.2%} of its range")
        except Exception as exc:  # the transformer serves as diffusers wrote it
            log.warning("the engine's kernels are not used (%s: %s)", type(exc).__name__, exc)
            if installed is not None:
                installed.undo()
            return
        self.kernels, self._installed_kernels = installed.counts, installed
        log.info("the engine's kernels: %s (forward within %.3f%% of the plain one)", self.kernels, 100 * difference)

    def _fastest_attention_backend(self) -> str:
        """Time torch's fused attention kernels on this GPU at the transformer's head size and a 480p-sized
        sequence, and name the fastest as a diffusers attention backend."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        config = self.pipe.transformer.config
        heads = int(getattr(config, "num_attention_heads", 12))
        head_dim = int(getattr(config, "attention_head_dim", 128))
        q, k, v = (torch.randn(2, heads, 8192, head_dim, device="cuda", dtype=self.dtype) for _ in range(3))
        candidates = {
            "_native_cudnn": SDPBackend.CUDNN_ATTENTION,
            "_native_flash": SDPBackend.FLASH_ATTENTION,
            "_native_efficient": SDPBackend.EFFICIENT_ATTENTION,
        }
        times: dict[str, float] = {}
        for name, kernel in candidates.items():
            try:
                with sdpa_kernel(kernel):
                    for _ in range(2):
                        torch.nn.functional.scaled_dot_product_attention(q, k, v)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(5):
                        torch.nn.functional.scaled_dot_product_attention(q, k, v)
                    end.record()
                    end.synchronize()
                    times[name] = start.elapsed_time(end) / 5
            except RuntimeError:  # kernel not available for this GPU, dtype or shape
                continue
        log.info("attention kernels (ms per call): %s", {k: round(v, 3) for k, v in times.items()})
        return min(times, key=times.__getitem__) if times else "default"

    # --- shapes ------------------------------------------------------------------------------------------

    def _size_multiple(self) -> int:
        # Latent patches must tile the frame: VAE spatial factor x transformer patch size.
        vae_factor = getattr(self.pipe, "vae_scale_factor_spatial", None) or getattr(self.pipe, "vae_scale_factor", 8)
        patch = getattr(getattr(self.pipe, "transformer", None), "config", None)
        patch_size = getattr(patch, "patch_size", None) if patch is not None else None
        spatial_patch = patch_size[-1] if isinstance(patch_size, (list, tuple)) else (patch_size or 2)
        return int(vae_factor) * int(spatial_patch)

    def native_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the model can make: each side rounded up to the model's multiple."""
        m = self.size_multiple
        return (-(-width // m) * m, -(-height // m) * m)

    def batch_key(self, params: GenerationParams) -> tuple | None:
        """Requests with equal keys can share one denoising loop; None: this request runs alone."""
        if not self.batched_loop or any(k in self.call_parameters for k in params.extra):
            return None
        return (
            self.native_size(params.width, params.height),
            params.num_frames,
            params.num_inference_steps,
            float(params.guidance_scale),
            params.flow_shift,
        )

    def set_max_batch(self, max_batch: int) -> None:
        """Batch sizes the transformer runs at when shapes are static: powers of two below max_batch, and it."""
        self.batch_buckets = sorted({*(2**i for i in range(max_batch.bit_length()) if 2**i < max_batch), max_batch})

    def _bucket(self, count: int) -> int:
        if not self.static_shapes:
            return count
        return next((size for size in self.batch_buckets if size >= count), count)

    def _scheduler_for(self, flow_shift: float | None) -> Any:
        config = self.default_scheduler_config
        key = "flow_shift" if "flow_shift" in config else ("shift" if "shift" in config else None)
        if flow_shift is None or key is None:
            return self.pipe.scheduler.__class__.from_config(config)
        return self.pipe.scheduler.__class__.from_config(config, **{key: flow_shift})

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
        self._on_device_thread(self._generate_batch_here, items, on_result)

    def _generate_batch_here(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        if self.pipe is None:
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
                result: GenerationOutput | BaseException = self._generate_plain(
                    item.params, item.on_step, item.should_stop
                )
            except Exception as exc:
                result = exc
            on_result(0, result)
            return
        self._generate_batched(items, on_result)

    def _generate_plain(
        self,
        params: GenerationParams,
        on_step: Callable[[int, int], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> GenerationOutput:
        """The pipeline's own `__call__`: any diffusers text-to-video pipeline."""
        total = params.num_inference_steps
        native_w, native_h = self.native_size(params.width, params.height)
        step_times: list[float] = []
        started = time.perf_counter()

        def step_end(pipe: Any, step: int, timestep: Any, callback_kwargs: dict) -> dict:
            step_times.append(time.perf_counter())
            if on_step is not None:
                on_step(step + 1, total)
            if should_stop is not None and should_stop():
                raise GenerationCancelled
            return callback_kwargs

        if should_stop is not None and should_stop():
            raise GenerationCancelled
        self.pipe.scheduler = self._scheduler_for(params.flow_shift)
        kwargs: dict[str, Any] = {
            "prompt": params.prompt,
            "negative_prompt": params.negative_prompt,
            "height": native_h,
            "width": native_w,
            "num_frames": params.num_frames,
            "num_inference_steps": total,
            "guidance_scale": params.guidance_scale,
            "generator": torch.Generator(device="cpu").manual_seed(params.seed),
            "output_type": "np",
            "callback_on_step_end": step_end,
        }
        kwargs.update({k: v for k, v in params.extra.items() if k in self.call_parameters})
        kwargs = {k: v for k, v in kwargs.items() if k in self.call_parameters and v is not None}
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            result = self.pipe(**kwargs)
        finished = time.perf_counter()
        frames = to_uint8_frames(result.frames)
        denoise_end = step_times[-1] if step_times else finished
        return self._output(frames, params, finished - started, denoise_end - started, finished - denoise_end)

    def _output(
        self,
        frames: np.ndarray,
        params: GenerationParams,
        inference_s: float,
        denoise_s: float,
        decode_s: float,
        batch_size: int = 1,
    ) -> GenerationOutput:
        # A pipeline may make its own native size (the project's small model does); resize whatever came out.
        native_w, native_h = frames.shape[2], frames.shape[1]
        if (native_w, native_h) != (params.width, params.height):
            frames = resize_frames(frames, params.width, params.height)
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.device == "cuda" else None
        return GenerationOutput(
            frames=frames,
            native_size=(native_w, native_h),
            inference_time_s=inference_s,
            stage_durations={"denoise": denoise_s, "decode": decode_s},
            peak_memory_mb=peak,
            batch_size=batch_size,
        )

    def _embed(self, texts: list[str]) -> torch.Tensor:
        """Text embeddings (len(texts), L, D) in the transformer's dtype, from the cache where it has them."""
        missing = list(dict.fromkeys(text for text in texts if text not in self._text_cache))
        if missing:
            embeds, _ = self.pipe.encode_prompt(
                prompt=missing,
                do_classifier_free_guidance=False,
                max_sequence_length=self.max_sequence_length,
                device=self.device,
            )
            embeds = embeds.to(self.pipe.transformer.dtype)
            for text, row in zip(missing, embeds, strict=True):
                self._text_cache[text] = row
        rows = []
        for text in texts:
            self._text_cache.move_to_end(text)
            rows.append(self._text_cache[text])
        stacked = torch.stack(rows)
        while len(self._text_cache) > max(self.text_cache_size, len(texts)):
            self._text_cache.popitem(last=False)
        return stacked

    def _generate_batched(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        """The engine's own loop over a Wan-style pipeline, with the pipeline's own pieces (prompt encoding,
        latents from each request's seed as the pipeline draws them, scheduler, VAE), so a request makes the
        same video alone or in a batch, and the same as the plain pipeline call."""
        pipe, device, count = self.pipe, self.device, len(items)
        first = items[0].params
        native_w, native_h = self.native_size(first.width, first.height)
        total = first.num_inference_steps
        started = time.perf_counter()
        alive = [True] * count

        def drop_cancelled() -> bool:
            for i, item in enumerate(items):
                if alive[i] and item.should_stop is not None and item.should_stop():
                    alive[i] = False
                    on_result(i, GenerationCancelled())
            return any(alive)

        if not drop_cancelled():
            return
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        transformer = pipe.transformer
        cfg = first.guidance_scale > 1.0
        guidance = first.guidance_scale
        with torch.inference_mode():
            padding = self._bucket(count) - count  # rows that only keep the shape static
            context = _pad_rows(self._embed([item.params.prompt for item in items]), padding)
            if cfg:
                negative = self._embed([item.params.negative_prompt or "" for item in items])
                context = torch.cat([context, _pad_rows(negative, padding)])
            channels = transformer.config.in_channels
            latents = torch.cat(
                [
                    pipe.prepare_latents(
                        1,
                        channels,
                        native_h,
                        native_w,
                        item.params.num_frames,
                        torch.float32,
                        device,
                        torch.Generator(device="cpu").manual_seed(item.params.seed),
                    )
                    for item in items
                ]
            )
            latents = _pad_rows(latents, padding)
            scheduler = self._scheduler_for(first.flow_shift)
            scheduler.set_timesteps(total, device=device)
            if hasattr(scheduler, "set_begin_index"):
                scheduler.set_begin_index(0)  # no device-to-host read of the timestep in step()
            steps_done = _StepProgress(device, total, items, alive)
            for t in scheduler.timesteps:
                model_input = latents.to(transformer.dtype)
                if cfg:
                    model_input = torch.cat([model_input, model_input])
                forward = self.graphs or self._transformer_forward
                out = forward(model_input, t.expand(model_input.shape[0]), context)
                if cfg:
                    cond, uncond = out.chunk(2)
                    out = uncond + guidance * (cond - uncond)
                latents = scheduler.step(out, t, latents, return_dict=False)[0]
                steps_done.step_queued()
                if not drop_cancelled():
                    return
            steps_done.finish()
            denoise_end = time.perf_counter()
            self._decode(items, latents, alive, on_result, started, denoise_end)

    def _transformer_forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor):
        return self.pipe.transformer(
            hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=context, return_dict=False
        )[0]

    def _decode(
        self,
        items: Sequence[BatchItem],
        latents: torch.Tensor,
        alive: list[bool],
        on_result: ResultCallback,
        started: float,
        denoise_end: float,
    ) -> None:
        vae = self.pipe.vae
        z_dim = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device, vae.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device, vae.dtype)
        first = items[0].params
        native_w, native_h = self.native_size(first.width, first.height)
        pending = [i for i in range(len(items)) if alive[i]]
        groups = []
        for size in _decode_group_sizes(len(pending), self._decode_chunk(first.num_frames, native_w, native_h)):
            groups.append(pending[:size])
            pending = pending[size:]
        denoise_s = denoise_end - started
        for group in groups:
            if all(_stopped(items[i]) for i in group):
                for i in group:
                    on_result(i, GenerationCancelled())
                continue
            decode_start = time.perf_counter()
            z = latents[group].to(vae.dtype) / inv_std + mean
            frames = self._decode_streaming(z, [items[i] for i in group])
            finished = time.perf_counter()
            for row, i in enumerate(group):
                output = self._output(
                    frames[row], items[i].params, finished - started, denoise_s, finished - decode_start, len(items)
                )
                on_result(i, output)

    def _decode_streaming(self, z: torch.Tensor, items: Sequence[BatchItem]) -> np.ndarray:
        """Decode latents (B, ...) to uint8 frames (B, T, H, W, 3), handing each item's frames to its
        `on_frames` as every latent frame is decoded. On a GPU the next latent frame is already queued while the
        previous one's frames travel to the host, so the device does not wait for the hand-over."""
        width, height = items[0].params.width, items[0].params.height
        chunks: list[np.ndarray] = []
        in_flight: tuple[torch.Tensor, Any] | None = None

        def hand_over(host: torch.Tensor, ready: Any) -> None:
            if ready is not None:
                ready.synchronize()
            frames = host.numpy()
            if frames.shape[3] != width or frames.shape[2] != height:
                frames = np.stack([resize_frames(video, width, height) for video in frames])
            chunks.append(frames)
            for row, item in enumerate(items):
                if item.on_frames is not None:
                    item.on_frames(frames[row])

        with _vae_conv_flags(self.device):
            for video in vae_decode_chunks(self.pipe.vae, z):
                frames = to_uint8_tensor(video)
                if self.device == "cuda":
                    host = torch.empty(frames.shape, dtype=torch.uint8, pin_memory=True)
                    host.copy_(frames, non_blocking=True)
                    ready = torch.cuda.Event()
                    ready.record()
                else:
                    host, ready = frames, None
                if in_flight is not None:
                    hand_over(*in_flight)
                in_flight = (host, ready)
            if in_flight is not None:
                hand_over(*in_flight)
        return np.concatenate(chunks, axis=1)

    # --- start-up ----------------------------------------------------------------------------------------

    def _decode_chunk(self, frames: int, width: int, height: int) -> int:
        """Most videos one VAE decode call takes: a power of two, within the pixel budget."""
        fit = max(1, DECODE_PIXEL_BUDGET // max(1, frames * width * height))
        return 1 << (fit.bit_length() - 1)

    def warmup(self, sizes: Sequence[tuple[int, int, int]], max_batch: int = 1) -> dict[str, float]:
        """Run each size (width, height, frames) once at each batch size the transformer and the VAE will see
        (the batch buckets up to max_batch), so that no request waits for a compile. Returns the seconds each
        run took."""
        return self._on_device_thread(self._warmup, sizes, max_batch)

    def _warmup(self, sizes: Sequence[tuple[int, int, int]], max_batch: int = 1) -> dict[str, float]:
        if not self.batched_loop:
            return {}
        self.set_max_batch(max_batch)
        if self.graphs is not None:
            self.graphs.recording = True
        if self.device == "cuda" and sizes and self.vae_channels_last is None:
            self._pick_vae_memory_format(max(sizes, key=lambda size: size[0] * size[1] * size[2]))
        for width, height, frames in sizes:
            batches = set(self.batch_buckets) if self.static_shapes else {1, max_batch}
            native_w, native_h = self.native_size(width, height)
            chunk = self._decode_chunk(frames, native_w, native_h)
            batches |= {size for size in _decode_group_sizes(max_batch, chunk)}
            for batch in sorted(size for size in batches if size <= max_batch):
                items = [
                    BatchItem(GenerationParams(f"warm-up {i}", width, height, frames, WARMUP_STEPS, 5.0, seed=i))
                    for i in range(batch)
                ]
                started = time.perf_counter()
                try:
                    self.generate_batch(items, lambda _i, result: _raise_if_error(result))
                except Exception as exc:
                    if self.device != "cuda" or (self.compile == "off" and self.attention_backend is None):
                        raise
                    # A kernel or compile that fails here would fail requests: serve eager, default attention.
                    log.warning("warm-up failed (%s: %s); compile and attention backend off", type(exc).__name__, exc)
                    self._eager_fallback()
                    self.generate_batch(items, lambda _i, result: _raise_if_error(result))
                if self.device == "cuda":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - started
                self.warmup_seconds[f"{width}x{height}x{frames} batch {batch}"] = round(seconds, 2)
                log.info("warm-up %dx%dx%d batch %d: %.1f s", width, height, frames, batch, seconds)
        if self.graphs is not None:
            started = time.perf_counter()
            captured = self.graphs.capture_seen()
            self.warmup_seconds["cuda graphs"] = round(time.perf_counter() - started, 2)
            log.info("CUDA graphs of the transformer: %d, captured in %.1f s", captured, time.perf_counter() - started)
            if captured:
                self._replay_once(sizes)
        for text in [text for text in self._text_cache if text.startswith("warm-up ")]:
            del self._text_cache[text]  # the empty negative prompt stays: most requests use it
        return dict(self.warmup_seconds)

    def _replay_once(self, sizes: Sequence[tuple[int, int, int]]) -> None:
        """One request of each size through the captured graphs before serving: whatever a graph's first
        replays still cost is paid here, not by the first user."""
        for width, height, frames in sizes:
            started = time.perf_counter()
            output = self.generate(GenerationParams("warm-up replay", width, height, frames, WARMUP_STEPS, 5.0, seed=0))
            torch.cuda.synchronize()
            stages = {k: round(v, 3) for k, v in output.stage_durations.items()}
            seconds = round(time.perf_counter() - started, 2)
            self.warmup_seconds[f"{width}x{height}x{frames} replay"] = seconds
            log.info("warm-up replay %dx%dx%d: %.2f s %s", width, height, frames, seconds, stages)

    def _pick_vae_memory_format(self, size: tuple[int, int, int]) -> None:
        """Time one VAE decode at `size` with the convolution weights as they are and in channels-last order,
        and keep the faster."""
        vae = self.pipe.vae
        width, height, frames = size
        native_w, native_h = self.native_size(width, height)
        latent_frames = (frames - 1) // getattr(self.pipe, "vae_scale_factor_temporal", 4) + 1
        factor = getattr(self.pipe, "vae_scale_factor_spatial", 8)
        z = torch.randn(1, vae.config.z_dim, latent_frames, native_h // factor, native_w // factor, device="cuda")
        z = z.to(vae.dtype)
        times: dict[bool, float] = {}
        with torch.inference_mode(), _vae_conv_flags(self.device):
            for channels_last in (False, True):
                _conv_weights_channels_last(vae, channels_last)
                vae.decode(z, return_dict=False)
                torch.cuda.synchronize()
                started = time.perf_counter()
                vae.decode(z, return_dict=False)
                torch.cuda.synchronize()
                times[channels_last] = time.perf_counter() - started
        self.vae_channels_last = times[True] < times[False]
        if not self.vae_channels_last:
            _conv_weights_channels_last(vae, False)
        log.info("VAE decode at %dx%dx%d: %.3f s as is, %.3f s channels-last", width, height, frames, *times.values())

    def _eager_fallback(self) -> None:
        transformer = self.pipe.transformer
        transformer = getattr(transformer, "_orig_mod", transformer)  # a whole-model torch.compile wrapper
        self.pipe.transformer = transformer
        for module in transformer.modules():
            if getattr(module, "_compiled_call_impl", None) is not None:
                module._compiled_call_impl = None
        if self._installed_kernels is not None:
            self._installed_kernels.undo()
            self.kernels, self._installed_kernels = {}, None
        if self.attention_backend is not None and hasattr(transformer, "set_attention_backend"):
            transformer.set_attention_backend("native")
        self.compile, self.attention_backend = "off", None
        if self.graphs is not None:
            self.graphs.disable()


class _StepProgress:
    """Reports denoising steps to each live item as the device finishes them, without waiting for the device
    in the loop: on a GPU each step records an event that is only polled."""

    def __init__(self, device: str, total: int, items: Sequence[BatchItem], alive: list[bool]):
        self.device, self.total, self.items, self.alive = device, total, items, alive
        self.queued: list[Any] = []
        self.reported = 0

    def step_queued(self) -> None:
        if self.device == "cuda":
            event = torch.cuda.Event()
            event.record()
            self.queued.append(event)
            while self.queued and self.queued[0].query():
                self.queued.pop(0)
                self._report()
        else:
            self._report()

    def finish(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
        for _ in self.queued:
            self._report()
        self.queued.clear()

    def _report(self) -> None:
        self.reported += 1
        for i, item in enumerate(self.items):
            if self.alive[i] and item.on_step is not None:
                item.on_step(self.reported, self.total)


def _conv_weights_channels_last(module: torch.nn.Module, channels_last: bool) -> None:
    """Convolution weights in channels-last order (cuDNN then runs the convolutions in that layout), or back."""
    for conv in module.modules():
        if isinstance(conv, (torch.nn.Conv2d, torch.nn.Conv3d)):
            layout = torch.channels_last if conv.weight.dim() == 4 else torch.channels_last_3d
            conv.weight.data = conv.weight.data.contiguous(
                memory_format=layout if channels_last else torch.contiguous_format
            )


def _small_transformer_inputs(transformer: Any, device: str) -> dict[str, torch.Tensor]:
    """A random input for one forward of a Wan transformer: 2 samples of 2 latent frames of 16x16, 16 text
    tokens (the kernels run at the model's own widths, so this checks them at little cost)."""
    config = transformer.config
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = transformer.dtype
    return {
        "hidden_states": torch.randn(2, config.in_channels, 2, 16, 16, generator=generator, device=device).to(dtype),
        "timestep": torch.tensor([250.0, 750.0], device=device),
        "encoder_hidden_states": torch.randn(2, 16, config.text_dim, generator=generator, device=device).to(dtype),
    }


def _pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    if rows <= 0:
        return tensor
    return torch.cat([tensor, tensor[:1].expand(rows, *tensor.shape[1:])])


def _decode_group_sizes(count: int, chunk: int) -> list[int]:
    """Split `count` videos into decode calls of power-of-two sizes up to `chunk` (largest first), so the
    VAE sees only a few batch sizes: 7 with chunk 8 -> [4, 2, 1]; 19 -> [8, 8, 2, 1]."""
    sizes = []
    while count > 0:
        size = min(chunk, 1 << (count.bit_length() - 1))
        sizes.append(size)
        count -= size
    return sizes


def _stopped(item: BatchItem) -> bool:
    return item.should_stop is not None and item.should_stop()


def _raise_if_error(result: GenerationOutput | BaseException) -> None:
    if isinstance(result, BaseException):
        raise result


def _vae_conv_flags(device: str) -> Any:
    """cuDNN picks the VAE's 3-D convolution algorithms by timing them on a GPU (once per shape, at warm-up);
    its default heuristics are slower for these shapes. Only around the engine's VAE calls: a plain pipeline
    call in the same process keeps torch's defaults."""
    return torch.backends.cudnn.flags(enabled=True, benchmark=device == "cuda")


def to_uint8_tensor(video: torch.Tensor) -> torch.Tensor:
    """A decoded batch (B, C, T, H, W) in [-1, 1] -> uint8 (B, T, H, W, C) on its device, rounded as
    `to_uint8_frames` rounds the pipeline's own float output (only uint8 needs to cross to the host)."""
    video = (video / 2 + 0.5).clamp(0, 1)  # the pipeline's video processor, in the VAE's dtype
    video = (video.float() * 255.0 + 0.5).to(torch.uint8)
    return video.permute(0, 2, 3, 4, 1).contiguous()


def to_uint8_video(video: torch.Tensor) -> np.ndarray:
    """`to_uint8_tensor`, on the host as numpy."""
    return to_uint8_tensor(video).cpu().numpy()


def vae_decode_chunks(vae: Any, z: torch.Tensor) -> Iterator[torch.Tensor]:
    """`vae.decode(z)` (B, C, T, H, W) in pieces along time, in order: for Wan's causal VAE, the frames of
    each latent frame as its decoder makes them (the same numbers as its whole decode, which runs the same
    per-latent-frame loop and concatenates); for any other VAE, or a tiled decode, the whole video at once."""
    decoder, post_quant_conv = getattr(vae, "decoder", None), getattr(vae, "post_quant_conv", None)
    factor = getattr(vae, "spatial_compression_ratio", None)
    tiled = (
        getattr(vae, "use_tiling", False)
        and factor is not None
        and (z.shape[-1] > vae.tile_sample_min_width // factor or z.shape[-2] > vae.tile_sample_min_height // factor)
    )
    if type(vae).__name__ != "AutoencoderKLWan" or tiled or not hasattr(vae, "clear_cache") or decoder is None:
        yield vae.decode(z, return_dict=False)[0]
        return
    patch_size = vae.config.patch_size
    vae.clear_cache()
    try:
        x = post_quant_conv(z)
        for i in range(x.shape[2]):
            vae._conv_idx = [0]
            out = decoder(x[:, :, i : i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx, first_chunk=i == 0)
            if patch_size is not None:
                out = unpatchify_video(out, patch_size)
            yield torch.clamp(out, min=-1.0, max=1.0)
    finally:
        vae.clear_cache()


def unpatchify_video(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    return unpatchify(x, patch_size=patch_size)


def to_uint8_frames(frames: Any) -> np.ndarray:
    """Pipelines return (B, T, H, W, C) floats in [0, 1], a list of those, or PIL frames: take video 0."""
    if isinstance(frames, torch.Tensor):
        frames = frames.float().cpu().numpy()
    if isinstance(frames, list):
        frames = frames[0]
        if isinstance(frames, list):  # PIL images
            frames = np.stack([np.asarray(image.convert("RGB")) for image in frames])
    array = np.asarray(frames)
    if array.ndim == 5:
        array = array[0]
    if array.dtype != np.uint8:
        array = (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return np.ascontiguousarray(array)


def resize_frames(frames: np.ndarray, width: int, height: int) -> np.ndarray:
    tensor = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    resized = torch.nn.functional.interpolate(tensor, size=(height, width), mode="bilinear", antialias=True)
    return resized.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
