"""The VAE's decode in pieces along time, as the decoder makes them: what the engine's decode (studio.engine.vae_decode)
and the decode split across ranks (studio.engine.parallel.split_decode) both stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from studio.engine import vae_fused
from studio.engine.frames import unpatchify_video


def vae_decode_chunks(vae: Any, z: torch.Tensor, fused: bool = True) -> Iterator[torch.Tensor]:
    """`vae.decode(z)` (B, C, T, H, W) in pieces along time, in order: for Wan's causal VAE, the frames of
    each latent frame as its decoder makes them (the same numbers as its whole decode, which runs the same
    per-latent-frame loop and concatenates); for any other VAE, or a tiled decode, the whole video at once.

    Where the engine installed the fused walk for this VAE (studio.engine.vae_fused) and `fused` is true, the
    latent frames go through it instead of the decoder's forward (the same convolutions, fewer passes over
    memory)."""
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
    walk = vae_fused.installed(decoder) if fused else None
    vae.clear_cache()
    try:
        x = post_quant_conv(z)
        for i in range(x.shape[2]):
            # AutoencoderKLWan decodes latent frame by latent frame only inside `decode`, which returns the whole
            # video; its causal cache (`_feat_map`, `_conv_idx`) is what that loop passes to the decoder, so the
            # same loop is run here with it, a frame at a time.
            vae._conv_idx = [0]
            if walk is not None:
                out = walk.decode_frame(x[:, :, i : i + 1], first_chunk=i == 0)
            else:
                out = decoder(x[:, :, i : i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx, first_chunk=i == 0)
            if patch_size is not None:
                out = unpatchify_video(out, patch_size)
            yield torch.clamp(out, min=-1.0, max=1.0)
    finally:
        vae.clear_cache()
        if walk is not None:
            walk.reset()  # its cache holds a few frames of every level: not kept between videos
