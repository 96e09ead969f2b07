"""Loading a diffusers text-to-video pipeline onto a device, and what the engine reads off it once loaded."""

from __future__ import annotations

import importlib
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from studio.engine.allocator import keep_freed_blocks
from studio.engine.generation_types import ModelLoadError


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was asked for, but torch sees no CUDA GPU")
    return device


def set_up_device(device: str, threads: int | None) -> tuple[str, torch.dtype]:
    """The device to run on and the dtype to load in (bf16 on a GPU); on a CPU the allocator keeps its freed
    blocks, and torch takes `threads` threads where given."""
    device = resolve_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cpu":
        keep_freed_blocks()
    if threads:
        torch.set_num_threads(threads)
    return device, dtype


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


def quiet_loading() -> None:
    """No progress bars while the pipeline loads: the server's log is read as text (the Server tab shows it), where
    a bar is a line of block characters redrawn over and over; the engine says itself when it has loaded."""
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # a pipeline without a text encoder of transformers'
        return
    transformers_logging.disable_progress_bar()


def from_pretrained(model: str, dtype: torch.dtype) -> tuple[Any, str]:
    """The pipeline at `model` (a directory, or a hub id where a network exists), and where it came from."""
    from diffusers import DiffusionPipeline

    if looks_like_local_path(model):
        path = Path(model).expanduser()
        if not (path / "model_index.json").is_file():
            raise ModelLoadError(
                f"model directory {str(path)!r} not found or not a diffusers pipeline (no model_index.json)"
            )
        source = str(path)
    else:
        source = model  # a hub id: downloads where a network exists
    register_project_pipelines()
    quiet_loading()
    try:
        with warnings.catch_warnings():
            # diffusers 0.36+ renamed torch_dtype to dtype, which older releases the project allows do not know.
            warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
            return DiffusionPipeline.from_pretrained(source, torch_dtype=dtype), source
    except Exception as exc:  # surfaced to the user as the server's start-up error
        raise ModelLoadError(f"could not load pipeline {source!r}: {exc}") from exc


@dataclass(frozen=True)
class PipelineFacts:
    """What the engine reads off a loaded pipeline once: how it is called and which sizes it can make."""

    call_parameters: frozenset[str]
    max_sequence_length: int
    size_multiple: int
    scheduler_class: type
    scheduler_config: dict[str, Any]
    batched_loop: bool  # whether the engine's own (batching) denoising loop drives this pipeline

    @classmethod
    def of(cls, pipe: Any) -> PipelineFacts:
        signature = inspect.signature(pipe.__call__).parameters
        max_len = signature.get("max_sequence_length")
        return cls(
            call_parameters=frozenset(signature),
            max_sequence_length=max_len.default if max_len is not None and isinstance(max_len.default, int) else 512,
            size_multiple=_size_multiple(pipe),
            scheduler_class=type(pipe.scheduler),
            scheduler_config=dict(pipe.scheduler.config),
            batched_loop=_supports_batched_loop(pipe),
        )

    def native_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the model can make: each side rounded up to the model's multiple."""
        m = self.size_multiple
        return (-(-width // m) * m, -(-height // m) * m)

    def new_scheduler(self, flow_shift: float | None) -> Any:
        """A fresh scheduler of the pipeline's own configuration, with `flow_shift` where one is given."""
        config = self.scheduler_config
        key = "flow_shift" if "flow_shift" in config else ("shift" if "shift" in config else None)
        if flow_shift is None or key is None:
            return self.scheduler_class.from_config(config)
        return self.scheduler_class.from_config(config, **{key: flow_shift})


def _size_multiple(pipe: Any) -> int:
    # Latent patches must tile the frame: VAE spatial factor x transformer patch size.
    vae_factor = getattr(pipe, "vae_scale_factor_spatial", None) or getattr(pipe, "vae_scale_factor", 8)
    patch = getattr(getattr(pipe, "transformer", None), "config", None)
    patch_size = getattr(patch, "patch_size", None) if patch is not None else None
    spatial_patch = patch_size[-1] if isinstance(patch_size, (list, tuple)) else (patch_size or 2)
    return int(vae_factor) * int(spatial_patch)


def _supports_batched_loop(pipe: Any) -> bool:
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
