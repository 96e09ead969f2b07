"""Where an engine request's time goes: the text encoder, the transformer's attention, the rest of the transformer,
the VAE decode and the encode to mp4; and the transformer's FLOPs, counted from its configuration, for an achieved
rate.

The engine reports its own stage times (denoise, decode). Inside the denoise, the text encoder is timed on its own
(one encode of the prompt and the negative prompt, as a request makes it), and attention by its kernels alone at the
request's shapes (self-attention over the video's tokens and cross-attention to the text's, each layer, the guidance
pair as one batch), through the engine's attention op with the kernel the engine picked. The rest of the transformer
is what is left of the denoise: its products, norms, rotary embedding and the scheduler's steps.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

TEXT_TOKENS = 512  # Wan's prompts are padded to this many tokens


def video_tokens(config: Any, width: int, height: int, frames: int) -> int:
    """One sample's tokens: Wan's VAE (8x spatial, 4x temporal), then the transformer's patches."""
    _, patch_h, patch_w = config.patch_size
    return ((frames - 1) // 4 + 1) * (height // 8 // patch_h) * (width // 8 // patch_w)


def forward_flops(config: Any, tokens: int, batch: int, text_tokens: int = TEXT_TOKENS) -> dict[str, float]:
    """A Wan transformer forward's FLOPs: attention's two products (q·k and p·v, self and cross) and the rest's
    products (projections and the feed-forward); norms and pointwise work are not counted."""
    width = config.num_attention_heads * config.attention_head_dim
    per_token_layer = 2 * (4 * width * width + 2 * width * width + 2 * width * config.ffn_dim)  # self, cross q/o, ffn
    text_layer = 2 * 2 * width * width * text_tokens  # cross-attention's k and v of the text
    attention_layer = 4 * tokens * tokens * width + 4 * tokens * text_tokens * width
    layers = config.num_layers
    return {
        "attention": float(batch * layers * attention_layer),
        "rest": float(batch * layers * (per_token_layer * tokens + text_layer)),
    }


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed_s(function: Any, repeats: int, device: str) -> float:
    function()  # warm-up: the kernel's plan, the allocator
    _sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    _sync(device)
    return (time.perf_counter() - started) / repeats


def attention_per_forward_s(
    config: Any, tokens: int, batch: int, backend: str, device: str = "cuda", repeats: int = 3
) -> float:
    """The attention kernels of one forward: each layer's self-attention and cross-attention, by the engine's
    attention op with `backend` (studio.engine.gpu.kernels' name)."""
    from studio.engine.gpu.kernels import attention_bnhd

    heads, dim = config.num_attention_heads, config.attention_head_dim
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (torch.randn(batch, tokens, heads, dim, device=device, dtype=dtype) for _ in range(3))
    text_k, text_v = (torch.randn(batch, TEXT_TOKENS, heads, dim, device=device, dtype=dtype) for _ in range(2))
    self_s = _timed_s(lambda: attention_bnhd(q, k, v, backend), repeats, device)
    cross_s = _timed_s(lambda: attention_bnhd(q, text_k, text_v, backend), repeats, device)
    return config.num_layers * (self_s + cross_s)


def text_encoder_s(pipe: Any, prompt: str, device: str, repeats: int = 3) -> float:
    """One request's prompt encoding: the prompt and the (empty) negative prompt through the text encoder."""

    def encode() -> None:
        with torch.inference_mode():
            pipe.encode_prompt(prompt=prompt, negative_prompt="", do_classifier_free_guidance=True, device=device)

    return _timed_s(encode, repeats, device)


def mp4_encode_s(frames: np.ndarray, fps: int = 16) -> float:
    """The frames encoded to an mp4 as the engine writes it (on the CPU, beside the next request's GPU work)."""
    from studio.engine.encoding import encode_pieces

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        encode_pieces([frames], fps, Path(folder) / "video.mp4")
        return time.perf_counter() - started


def request_breakdown(
    latency_s: float,
    stages: dict[str, float],
    text_s: float,
    attention_forward_s: float,
    forwards: int,
    encode_s: float,
    flops: dict[str, float],
    peak_flops: float,
) -> dict[str, Any]:
    """The request's time in parts, each as seconds and a share of its latency; the transformer's achieved rate."""
    attention_s = attention_forward_s * forwards
    transformer_s = stages["denoise"] - text_s
    parts = {
        "text_encoder": text_s,
        "attention": attention_s,
        "transformer_rest": transformer_s - attention_s,
        "vae_decode": stages["decode"],
        "other": latency_s - stages["denoise"] - stages["decode"],
    }
    total_flops = (flops["attention"] + flops["rest"]) * forwards
    return {
        "seconds": {name: round(value, 3) for name, value in parts.items()},
        "share": {name: round(value / latency_s, 3) for name, value in parts.items()},
        "mp4_encode_s (beside the GPU work, not in the latency)": round(encode_s, 3),
        "transformer_flops": total_flops,
        "attention_share_of_flops": round(flops["attention"] / (flops["attention"] + flops["rest"]), 3),
        "transformer_tflops": round(total_flops / transformer_s / 1e12, 1),
        "request_tflops": round(total_flops / latency_s / 1e12, 1),
        "peak_tflops": round(peak_flops / 1e12, 1),
        "transformer_of_peak": round(total_flops / transformer_s / peak_flops, 3),
        "request_of_peak": round(total_flops / latency_s / peak_flops, 3),
    }
