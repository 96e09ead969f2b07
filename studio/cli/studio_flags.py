"""The StudioSettings flags that the commands share, and the settings they give."""

from __future__ import annotations

import argparse

from studio.config import StudioSettings, load_settings
from studio.settings_flags import ArgumentContainer, add_model_flags, model_values

# Which engine makes the videos, and how a managed one is started.
ENGINE_FIELDS = (
    "engine",
    "remote_urls",
    "api_key",
    "model",
    "served_model_name",
    "device",
    "engine_threads",
    "vllm_executable",
    "tensor_parallel_size",
    "cfg_parallel_size",
    "ulysses_degree",
    "ring_degree",
    "cache_backend",
    "quantization",
    "diffusion_attention_backend",
    "enforce_eager",
    "vae_tiling",
    "model_class_name",
    "gpus",
    "init_timeout_s",
    "extra_serve_args",
    "use_docker",
    "guardrails",
    "allow_risky_serve_args",
    "auto_restart",
)


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser.add_argument_group("engine"), StudioSettings, ENGINE_FIELDS)


def add_studio_flags(parser: ArgumentContainer, names: tuple[str, ...]) -> None:
    add_model_flags(parser, StudioSettings, names)


def studio_settings(args: argparse.Namespace) -> StudioSettings:
    """Flags over env over `.env` over defaults."""
    return load_settings(**model_values(args, StudioSettings))
