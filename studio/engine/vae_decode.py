"""The VAE decode of a denoised batch: in groups of a few batch sizes, one latent frame at a time, each item's
frames handed over for encoding as they come; and the convolution layout that decodes fastest on a GPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from studio.engine.frames import finished_output, resize_frames, to_uint8_tensor
from studio.engine.generation_types import BatchItem, DecodeSkipped, GenerationCancelled, ResultCallback
from studio.engine.parallel.split_decode import can_split, split_frames
from studio.engine.vae_chunks import vae_decode_chunks

if TYPE_CHECKING:
    from studio.engine.parallel.rank import ParallelRank

log = logging.getLogger(__name__)

# Pixel-frames (frames x height x width) one VAE decode call may take when a batch decodes together: eight
# 33-frame 320x192 videos; a 33-frame 832x480 video is decoded alone.
DECODE_PIXEL_BUDGET = 8 * 33 * 320 * 192


def decode_chunk(frames: int, width: int, height: int) -> int:
    """Most videos one VAE decode call takes: a power of two, within the pixel budget."""
    fit = max(1, DECODE_PIXEL_BUDGET // max(1, frames * width * height))
    return 1 << (fit.bit_length() - 1)


def decode_group_sizes(count: int, chunk: int) -> list[int]:
    """Split `count` videos into decode calls of power-of-two sizes up to `chunk` (largest first), so the
    VAE sees only a few batch sizes: 7 with chunk 8 -> [4, 2, 1]; 19 -> [8, 8, 2, 1]."""
    sizes = []
    while count > 0:
        size = min(chunk, 1 << (count.bit_length() - 1))
        sizes.append(size)
        count -= size
    return sizes


def vae_conv_flags(device: str) -> Any:
    """cuDNN picks the VAE's 3-D convolution algorithms by timing them on a GPU (once per shape, at warm-up);
    its default heuristics are slower for these shapes. Only around the engine's VAE calls: a plain pipeline
    call in the same process keeps torch's defaults."""
    return torch.backends.cudnn.flags(enabled=True, benchmark=device == "cuda")


def conv_weights_channels_last(module: torch.nn.Module, channels_last: bool) -> None:
    """Convolution weights in channels-last order (cuDNN then runs the convolutions in that layout), or back."""
    for conv in module.modules():
        if isinstance(conv, (torch.nn.Conv2d, torch.nn.Conv3d)):
            layout = torch.channels_last if conv.weight.dim() == 4 else torch.channels_last_3d
            conv.weight.data = conv.weight.data.contiguous(
                memory_format=layout if channels_last else torch.contiguous_format
            )


def pick_vae_memory_format(pipe: Any, native_w: int, native_h: int, frames: int) -> bool:
    """Time one VAE decode of `frames` frames at the native size with the convolution weights as they are and
    in channels-last order, and keep the faster. True: channels-last was kept."""
    vae = pipe.vae
    latent_frames = (frames - 1) // getattr(pipe, "vae_scale_factor_temporal", 4) + 1
    factor = getattr(pipe, "vae_scale_factor_spatial", 8)
    z = torch.randn(1, vae.config.z_dim, latent_frames, native_h // factor, native_w // factor, device="cuda")
    z = z.to(vae.dtype)
    times: dict[bool, float] = {}
    with torch.inference_mode(), vae_conv_flags("cuda"):
        for channels_last in (False, True):
            conv_weights_channels_last(vae, channels_last)
            vae.decode(z, return_dict=False)
            torch.cuda.synchronize()
            started = time.perf_counter()
            vae.decode(z, return_dict=False)
            torch.cuda.synchronize()
            times[channels_last] = time.perf_counter() - started
    channels_last = times[True] < times[False]
    if not channels_last:
        conv_weights_channels_last(vae, False)
    log.info("VAE decode at %dx%dx%d: %.3f s as is, %.3f s channels-last", native_w, native_h, frames, *times.values())
    return channels_last


def decode_batch(
    vae: Any,
    items: Sequence[BatchItem],
    latents: torch.Tensor,
    alive: list[bool],
    on_result: ResultCallback,
    native_size: tuple[int, int],
    device: str,
    started: float,
    denoise_end: float,
    rank: ParallelRank | None = None,
) -> None:
    """Decode the denoised latents of the items still alive, group by group, and answer each item as its group
    is done (an item cancelled since is answered GenerationCancelled, where its whole group is; a group of items
    that ask for no decode is answered DecodeSkipped).

    With `rank` splitting the decode, every rank of the engine calls this on the same latents and decodes a
    strip of each frame; the leader's word decides the groups and which are skipped, and the leader answers."""
    z_dim = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device, vae.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device, vae.dtype)
    first = items[0].params
    native_w, native_h = native_size
    pending = [i for i in range(len(items)) if alive[i]]
    groups = []
    for size in decode_group_sizes(len(pending), decode_chunk(first.num_frames, native_w, native_h)):
        groups.append(pending[:size])
        pending = pending[size:]
    if rank is not None:
        groups = rank.agree_groups(groups)  # a follower sees no cancellations: the leader's rows
    denoise_s = denoise_end - started
    for group in groups:
        go_on = not all(items[i].stopped() or not items[i].decode for i in group)
        if rank is not None:
            go_on = rank.agree(go_on)
        if not go_on:
            for i in group:
                on_result(i, GenerationCancelled() if items[i].stopped() else DecodeSkipped())
            continue
        decode_start = time.perf_counter()
        z = latents[group].to(vae.dtype) / inv_std + mean
        frames = decode_streaming(vae, z, [items[i] for i in group], device, rank)
        if rank is not None and not rank.is_leader:
            continue
        finished = time.perf_counter()
        for row, i in enumerate(group):
            output = finished_output(
                frames[row],
                items[i].params,
                device,
                finished - started,
                denoise_s,
                finished - decode_start,
                len(items),
            )
            on_result(i, output)


def decoded_frames(vae: Any, z: torch.Tensor, rank: ParallelRank | None) -> Iterator[torch.Tensor]:
    """uint8 frames (B, T, H, W, 3) of `z`, latent frame by latent frame: on this rank alone, or in strips
    across the engine's ranks where it splits the decode and the VAE allows it."""
    if rank is not None and rank.splits_decode and can_split(vae, z, rank.layout.world_size):
        yield from split_frames(vae, z, rank)
        return
    for video in vae_decode_chunks(vae, z):
        yield to_uint8_tensor(video)


def decode_streaming(
    vae: Any, z: torch.Tensor, items: Sequence[BatchItem], device: str, rank: ParallelRank | None = None
) -> np.ndarray:
    """Decode latents (B, ...) to uint8 frames (B, T, H, W, 3), handing each item's frames to its
    `on_frames` as every latent frame is decoded. On a GPU the next latent frame is already queued while the
    previous one's frames travel to the host, so the device does not wait for the hand-over. A follower rank
    decodes its strips and keeps nothing."""
    if rank is not None and not rank.is_leader:
        with vae_conv_flags(device):
            for _ in decoded_frames(vae, z, rank):
                pass
        return np.empty((0,), dtype=np.uint8)
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

    with vae_conv_flags(device):
        for frames in decoded_frames(vae, z, rank):
            if device == "cuda":
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
