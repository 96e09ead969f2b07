"""The Wan2.1-T2V-1.3B-shaped pipeline the GPU benchmarks measure, with random weights: nothing is downloaded, and
speed does not depend on weight values. WanTransformer3DModel with its real configuration, AutoencoderKLWan at
diffusers' defaults, a UMT5-XXL-sized text encoder; the tokenizer and scheduler are the tiny model's (ids only).
Also the GPU's bf16 product rate and its peak memory, which the benchmarks report beside their times."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness import ROOT

TIERS = {"256p": (320, 192), "480p": (832, 480), "720p": (1280, 720)}

# Wan2.1-T2V-1.3B's transformer (its config.json).
WAN_1_3B = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 12,
    "attention_head_dim": 128,
    "in_channels": 16,
    "out_channels": 16,
    "text_dim": 4096,
    "freq_dim": 256,
    "ffn_dim": 8960,
    "num_layers": 30,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "image_dim": None,
    "added_kv_proj_dim": None,
    "rope_max_seq_len": 1024,
}
# google/umt5-xxl's encoder, as Wan2.1 uses it.
UMT5_XXL = {
    "vocab_size": 256384,
    "d_model": 4096,
    "d_kv": 64,
    "d_ff": 10240,
    "num_layers": 24,
    "num_heads": 64,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "feed_forward_proj": "gated-gelu",
    "layer_norm_epsilon": 1e-6,
    "tie_word_embeddings": False,
}
TINY_TRANSFORMER = {
    **WAN_1_3B,
    "text_dim": 256,
    "num_attention_heads": 2,
    "attention_head_dim": 64,
    "ffn_dim": 256,
    "num_layers": 2,
}
TINY_TEXT = {**UMT5_XXL, "vocab_size": 32128, "d_model": 256, "d_ff": 512, "num_layers": 2, "num_heads": 4}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def build_pipeline(device: str, smoke: bool, text_layers: int | None = None) -> tuple[Any, dict[str, float]]:
    """The Wan2.1-1.3B pipeline with random weights, built directly on the device (`text_layers`: a shallower
    stand-in of the text encoder)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tiny = ROOT / "assets" / "tiny-wan"
    seconds: dict[str, float] = {}
    torch.manual_seed(0)
    with torch.device(device):
        started = time.perf_counter()
        transformer = WanTransformer3DModel(**(TINY_TRANSFORMER if smoke else WAN_1_3B)).to(dtype)
        seconds["transformer"] = time.perf_counter() - started
        started = time.perf_counter()
        text_values = TINY_TEXT if smoke else UMT5_XXL
        if text_layers is not None:
            text_values = {**text_values, "num_layers": text_layers, "vocab_size": 32128}
        text_config = UMT5Config(**text_values)
        text_encoder = UMT5EncoderModel(text_config).to(dtype).eval()
        seconds["text_encoder"] = time.perf_counter() - started
        # diffusers' defaults are Wan2.1's VAE; the smoke test on a CPU takes the tiny model's.
        vae = (AutoencoderKLWan.from_pretrained(tiny / "vae") if smoke and device == "cpu" else AutoencoderKLWan()).to(
            dtype
        )
    scheduler = UniPCMultistepScheduler.from_pretrained(tiny / "scheduler")
    tokenizer = AutoTokenizer.from_pretrained(tiny / "tokenizer")
    pipe = WanPipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae, scheduler=scheduler
    )
    pipe.set_progress_bar_config(disable=True)
    sync(device)
    return pipe, seconds


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


MATMUL_N = 8192


def _product_times(warmups: int, timed: int) -> list[float]:
    """Seconds of `timed` single 8192^3 bf16 products on random data, after `warmups` untimed ones."""
    a, b = (torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(warmups):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(timed):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return times


def matmul_rate_burst(device: str) -> float:
    """bf16 matrix product rate (FLOP/s): the best of 10 single products after 3 warm-ups, from an idle GPU
    (the clocks the short bursts of a denoising step also run at)."""
    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    time.sleep(2.0)  # let the clocks settle back from whatever ran before
    return 2 * MATMUL_N**3 / min(_product_times(warmups=3, timed=10))


def matmul_rate(device: str) -> float:
    """bf16 matrix product rate (FLOP/s): median of 20 products after about a second of them (sustained
    clocks)."""
    if device != "cuda":
        return float("nan")
    return 2 * MATMUL_N**3 / statistics.median(_product_times(warmups=600, timed=20))


def peak_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def saved_model(args: argparse.Namespace) -> tuple[Path, float]:
    """The random-weight pipeline (text encoder cut to 2 layers) saved to a folder that engine processes load;
    its path and the seconds the save took. The pipeline itself is freed here."""
    pipe, _ = build_pipeline(args.device, smoke=args.smoke, text_layers=None if args.smoke else 2)
    model_dir = Path(tempfile.mkdtemp(prefix="wan-random-")) / "wan2.1-t2v-1.3b-random"
    started = time.perf_counter()
    pipe.save_pretrained(model_dir)
    seconds = round(time.perf_counter() - started, 1)
    del pipe
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return model_dir, seconds
