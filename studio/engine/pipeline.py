"""Loading a diffusers text-to-video pipeline and running it with per-step progress and cancel."""

from __future__ import annotations

import importlib
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)


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


class PipelineRunner:
    """Owns one diffusers pipeline on one device and runs one generation at a time."""

    def __init__(self, model: str, device: str = "auto", threads: int | None = None):
        self.model = model
        self.device = resolve_device(device)
        self.dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.threads = threads or 0  # 0: no budget (torch and the encoder use every core)
        if threads:
            torch.set_num_threads(threads)
        self.pipe: Any = None
        self.call_parameters: set[str] = set()
        self.size_multiple = 16
        self.default_scheduler_config: dict[str, Any] = {}

    def load(self) -> None:
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
        started = time.perf_counter()
        register_project_pipelines()
        try:
            self.pipe = DiffusionPipeline.from_pretrained(source, torch_dtype=self.dtype)
        except Exception as exc:  # surfaced to the user as the server's start-up error
            raise ModelLoadError(f"could not load pipeline {source!r}: {exc}") from exc
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self.call_parameters = set(inspect.signature(self.pipe.__call__).parameters)
        self.size_multiple = self._size_multiple()
        self.default_scheduler_config = dict(self.pipe.scheduler.config)
        log.info(
            "loaded %s (%s) on %s in %.1f s",
            source,
            type(self.pipe).__name__,
            self.device,
            time.perf_counter() - started,
        )

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

    def _scheduler_for(self, flow_shift: float | None) -> Any:
        config = self.default_scheduler_config
        key = "flow_shift" if "flow_shift" in config else ("shift" if "shift" in config else None)
        if flow_shift is None or key is None:
            return self.pipe.scheduler.__class__.from_config(config)
        return self.pipe.scheduler.__class__.from_config(config, **{key: flow_shift})

    def generate(
        self,
        params: GenerationParams,
        on_step: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> GenerationOutput:
        """Run the pipeline; `on_step(done, total)` after each step; `should_stop()` cancels at the next step."""
        if self.pipe is None:
            raise RuntimeError("pipeline not loaded")
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
        # A pipeline may make its own native size (the project's small model does); resize whatever came out.
        native_w, native_h = frames.shape[2], frames.shape[1]
        if (native_w, native_h) != (params.width, params.height):
            frames = resize_frames(frames, params.width, params.height)
        denoise_end = step_times[-1] if step_times else finished
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.device == "cuda" else None
        return GenerationOutput(
            frames=frames,
            native_size=(native_w, native_h),
            inference_time_s=finished - started,
            stage_durations={"denoise": denoise_end - started, "decode": finished - denoise_end},
            peak_memory_mb=peak,
        )


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
