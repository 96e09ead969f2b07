"""Wan 2.1's VAE decoder, one latent frame at a time, with its memory-bound work fused.

diffusers' decoder (`WanDecoder3d`) is mostly 3x3x3 convolutions, and between them it moves every activation
through memory many times: each RMS norm converts to float32, normalises, converts back, then multiplies by its
scale, its gain and adds a bias of 0.0 as separate passes; the SiLU is another; each causal convolution joins the
cached frames of the previous latent frame to its input (a copy), then pads the result in space (another copy)
before cuDNN sees it. Those passes over 96-channel full-resolution frames cost about as much as the
convolutions' arithmetic (benchmarks/RESULTS.md, the VAE decode).

Here the same modules, with the same weights, are walked by a function that does, before each convolution, the norm
and SiLU in one pass over rows of pixels (`norm_silu_rows`, compiled into a single kernel on a GPU), then one join
with the cached frames in channels-last order, and lets cuDNN pad in space itself. The cached frames are what
diffusers caches (the last two frames of each convolution's input, as the activation gives them); a first latent
frame sees two zero frames where diffusers pads two (the same numbers, so every convolution's input is the same as
diffusers'). The nearest upsampling runs in the activations' dtype (diffusers converts to float32 and back around
it: the same values). The roundings of the norm are kept as diffusers makes them (to the activations' dtype after
normalising, after the scale, after the gain), so on a CPU in float32 the frames equal the module's own decode, and
in bf16 they differ from it only by the order cuDNN sums in (`benchmarks/experiments/vae_decode_gpu.py` measures it).

On a GPU, where it checks out against these torch ops at install (`kernel_problem`), one Triton kernel does the norm,
the SiLU and the join together (studio.engine.gpu.vae_kernels): each activation read once and written once, into
the buffer the convolution takes. The walk is faster than the decoder's own forward with the compiled norm, and
faster still with the kernel (benchmarks/RESULTS.md, the VAE decode).

Anything but Wan 2.1's decoder layout (Wan 2.2's residual up blocks, a bias in a norm, other convolution shapes)
is left to the module's own forward: `fusable` says which.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from studio.engine.gpu import vae_kernels
from studio.engine.gpu.vae_kernels import CACHE_FRAMES

log = logging.getLogger(__name__)

NormFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def norm_silu_rows(rows: torch.Tensor, gamma: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """SiLU(RMS norm) of each row (N, C) of pixels: diffusers' `WanRMS_norm` (F.normalize in float32, rounded to
    the rows' dtype, times sqrt(C), rounded, times the gain, rounded), then the SiLU in that dtype. `scale` is a
    0-d float32 tensor (a number would be compiled into the kernel, one compile per channel count)."""
    xf = rows.float()
    norm = xf.pow(2).sum(dim=1, keepdim=True).sqrt().clamp_min(1e-12)
    y = (xf / norm).to(rows.dtype)
    y = (y * scale).to(rows.dtype)
    y = (y * gamma).to(rows.dtype)
    return F.silu(y)


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """(B, C, T, H, W) -> its pixels as rows (B*T*H*W, C): a view where x is channels-last, else a copy."""
    x = x.contiguous(memory_format=torch.channels_last_3d)
    return x.permute(0, 2, 3, 4, 1).reshape(-1, x.shape[1])


def from_rows(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    b, c, t, h, w = like.shape
    return rows.view(b, t, h, w, c).permute(0, 4, 1, 2, 3)


def join_frames(x: torch.Tensor, cached: torch.Tensor) -> torch.Tensor:
    """`cached` frames, then `x`'s, along time, in channels-last order: a causal convolution's input."""
    return torch.cat([cached, x], dim=2).contiguous(memory_format=torch.channels_last_3d)


def fusable(decoder: Any) -> bool:
    """Whether `decoder` is Wan 2.1's decoder as this walk knows it: up blocks of residual blocks and resamplers,
    norms without a bias, causal convolutions of temporal depth 3 (or 1 for the shortcuts)."""
    try:
        if type(decoder).__name__ != "WanDecoder3d":
            return False
        blocks = list(decoder.mid_block.resnets) + [r for up in decoder.up_blocks for r in up.resnets]
        if any(type(up).__name__ != "WanUpBlock" for up in decoder.up_blocks):
            return False
        norms = [decoder.norm_out] + [n for r in blocks for n in (r.norm1, r.norm2)]
        if any(not isinstance(n.bias, float) or n.bias != 0.0 or not n.channel_first for n in norms):
            return False
        convs = [decoder.conv_in, decoder.conv_out] + [c for r in blocks for c in (r.conv1, r.conv2)]
        resamplers = [up.upsamplers[0] for up in decoder.up_blocks if up.upsamplers is not None]
        if any(r.mode not in ("upsample2d", "upsample3d") for r in resamplers):
            return False
        return all(c.kernel_size[0] == 3 and c._padding[4] == CACHE_FRAMES for c in convs)
    except AttributeError:
        return False


class FusedWanDecoder:
    """Decodes latent frames through `decoder`'s modules with the fused joins; holds the causal cache of one
    video (`reset` between videos)."""

    def __init__(self, decoder: Any, compiled: bool, kernel: bool = False):
        self.decoder = decoder
        # The norm, SiLU and join as one Triton kernel (studio.engine.gpu.vae_kernels) on CUDA activations, where
        # the caller checked it here (`kernel_problem`); else the (compiled) norm, then the join.
        self.kernel = kernel
        # On rows of pixels and dynamic: one kernel for every level's channels, frame size, frames and batch, not a
        # compile each (rows and channels are never 1, which torch would specialise).
        self._norm: NormFn = torch.compile(norm_silu_rows, dynamic=True) if compiled else norm_silu_rows
        self._scales: dict[int, torch.Tensor] = {}
        self._cache: list[Any] = []
        self._resample_cache: list[Any] = []

    def reset(self) -> None:
        self._cache, self._resample_cache = [], []

    def decode_frame(self, x: torch.Tensor, first_chunk: bool) -> torch.Tensor:
        """One latent frame (B, C, 1, h, w) after the post-quant convolution -> its video frames (B, 3, T, H, W)."""
        if first_chunk:
            self.reset()
        slots = iter(range(1 << 30))
        resamples = iter(range(1 << 30))
        d = self.decoder
        x = self._conv(d.conv_in, x, None, next(slots))
        mid = d.mid_block
        x = self._residual(mid.resnets[0], x, slots)
        for attention, resnet in zip(mid.attentions, mid.resnets[1:], strict=True):
            if attention is not None:
                x = attention(x)
            x = self._residual(resnet, x, slots)
        for up in d.up_blocks:
            for resnet in up.resnets:
                x = self._residual(resnet, x, slots)
            if up.upsamplers is not None:
                x = self._resample(up.upsamplers[0], x, next(resamples))
        return self._conv(d.conv_out, x, d.norm_out, next(slots))

    def _conv(self, conv: Any, x: torch.Tensor, norm: Any, slot: int) -> torch.Tensor:
        """A causal 3x3x3 convolution of SiLU(norm(x)) (or of x), its input joined to the cached frames."""
        if slot == len(self._cache):
            b, _, _, h, w = x.shape
            self._cache.append(x.new_zeros((b, x.shape[1], CACHE_FRAMES, h, w)))
        cached = self._cache[slot]
        joined = self._kernel_join(x, cached, norm) if norm is not None and self.kernel and x.is_cuda else None
        if joined is None and norm is None:
            joined = join_frames(x, cached)
        elif joined is None:
            if id(norm) not in self._scales:
                self._scales[id(norm)] = torch.tensor(float(norm.scale), device=x.device)
            rows = self._norm_rows(as_rows(x), norm.gamma.view(-1), self._scales[id(norm)])
            joined = join_frames(from_rows(rows, x), cached)
        self._cache[slot] = joined[:, :, -CACHE_FRAMES:].clone()
        pad_w, _, pad_h = conv._padding[:3]
        return F.conv3d(joined, conv.weight, conv.bias, conv.stride, (0, pad_h, pad_w), conv.dilation, conv.groups)

    def _kernel_join(self, x: torch.Tensor, cached: torch.Tensor, norm: Any) -> torch.Tensor | None:
        """The kernel's joined input; None, and the torch path for good, where a launch fails (it passed its
        check at install: a failure now is an input it was not checked on, not a reason to fail the video)."""
        try:
            return vae_kernels.norm_silu_join(x, cached, norm.gamma.view(-1), float(norm.scale))
        except Exception as exc:
            log.warning(
                "VAE decode: the norm-and-join kernel failed (%s: %s); torch ops from now on", type(exc).__name__, exc
            )
            self.kernel = False
            return None

    def _norm_rows(self, rows: torch.Tensor, gamma: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """The norm and SiLU, compiled where asked; a compile this torch or GPU refuses falls back to the eager
        function (the same numbers, more passes) for good, rather than failing the video."""
        try:
            return self._norm(rows, gamma, scale)
        except Exception as exc:
            if self._norm is norm_silu_rows:
                raise
            log.warning("VAE decode: the compiled norm failed (%s: %s); eager from now on", type(exc).__name__, exc)
            self._norm = norm_silu_rows
            return self._norm(rows, gamma, scale)

    def _residual(self, block: Any, x: torch.Tensor, slots: Any) -> torch.Tensor:
        shortcut = block.conv_shortcut
        h = x if isinstance(shortcut, torch.nn.Identity) else F.conv3d(x, shortcut.weight, shortcut.bias)
        x = self._conv(block.conv1, x, block.norm1, next(slots))
        x = self._conv(block.conv2, x, block.norm2, next(slots))  # dropout: identity in inference
        return x + h

    def _resample(self, resample: Any, x: torch.Tensor, slot: int) -> torch.Tensor:
        """diffusers' WanResample, its own cache kept per slot; the nearest upsampling in x's dtype."""
        if slot == len(self._resample_cache):
            self._resample_cache.append(None)
        b, c, t, h, w = x.shape
        if resample.mode == "upsample3d":
            x = self._time_upsample(resample, x, slot)
            t = x.shape[2]
        x = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        upsample, conv = resample.resample[0], resample.resample[1]
        x = F.interpolate(x, scale_factor=upsample.scale_factor, mode=upsample.mode)
        x = conv(x)
        return x.view(b, t, x.size(1), x.size(2), x.size(3)).permute(0, 2, 1, 3, 4)

    def _time_upsample(self, resample: Any, x: torch.Tensor, slot: int) -> torch.Tensor:
        """Twice the frames, from the time convolution's two halves; the first latent frame passes as it is
        (diffusers marks its cache "Rep" then, and pads the next one's with a zero frame)."""
        cached = self._resample_cache[slot]
        if cached is None:
            self._resample_cache[slot] = "first"
            return x
        b, c, t, h, w = x.shape
        if isinstance(cached, str):
            cached = x.new_zeros((b, c, CACHE_FRAMES, h, w))
        joined = torch.cat([cached, x], dim=2)
        self._resample_cache[slot] = joined[:, :, -CACHE_FRAMES:].clone()
        conv = resample.time_conv
        x = F.conv3d(joined, conv.weight, conv.bias, conv.stride)
        x = x.reshape(b, 2, c, t, h, w)
        x = torch.stack((x[:, 0], x[:, 1]), 3)
        return x.reshape(b, c, t * 2, h, w)


# The fused walk each engine VAE decodes with (studio.engine.vae_chunks asks): keyed by the decoder module, so a
# plain pipeline call on the same VAE (`vae.decode`) keeps diffusers' own forward.
_INSTALLED: weakref.WeakKeyDictionary[Any, FusedWanDecoder] = weakref.WeakKeyDictionary()


def install(vae: Any, compiled: bool, kernel: bool = False) -> bool:
    """Decode `vae`'s latents through the fused walk from now on (`compiled`: its norms as one compiled kernel,
    for a GPU; eager on a CPU, where the compiler's kernels for changing shapes are slower than torch's; `kernel`:
    the norm, SiLU and join in the Triton kernel where it checks out on the VAE's device). False, and nothing
    changes, where the decoder is not one the walk knows."""
    decoder = getattr(vae, "decoder", None)
    if decoder is None or not fusable(decoder):
        log.info("VAE decode: %s keeps its own forward (not Wan 2.1's decoder layout)", type(decoder).__name__)
        return False
    if kernel:
        problem = kernel_problem(next(decoder.parameters()).device.type)
        if problem is not None:
            log.info("VAE decode: the norm and join stay torch ops (%s)", problem)
            kernel = False
    _INSTALLED[decoder] = FusedWanDecoder(decoder, compiled, kernel)
    log.info(
        "VAE decode: Wan 2.1's decoder walked with its norms fused (%s)",
        "one kernel with the joins" if kernel else "compiled" if compiled else "eager",
    )
    return True


# The kernel's frames may differ from the torch version's by this much (relative RMS): both round to the
# activations' dtype at the same points; the square root and the sigmoid may differ in their last bit.
MAX_KERNEL_RELATIVE_RMS = 0.01


@functools.cache
def kernel_problem(device: str) -> str | None:
    """None where the norm-and-join kernel runs on `device` and matches the torch version on random activations of
    the decoder's channel counts, batches and frames (every element written); else what is wrong. Asked once per
    device."""
    if device != "cuda" or not torch.cuda.is_available():
        return "the VAE's norm-and-join kernel runs on CUDA GPUs"
    generator = torch.Generator(device="cuda").manual_seed(0)
    for batch, channels, frames in ((1, 96, 4), (2, 384, 1), (3, 192, 2)):

        def draw(*shape: int, spread: float = 3.0) -> torch.Tensor:
            values = torch.randn(shape, device="cuda", generator=generator) * spread
            return values.to(torch.bfloat16).contiguous(memory_format=torch.channels_last_3d)

        x, cached = draw(batch, channels, frames, 7, 11), draw(batch, channels, CACHE_FRAMES, 7, 11)
        gamma = (torch.rand(channels, device="cuda", generator=generator) + 0.5).to(torch.bfloat16)
        scale = channels**0.5
        joined = vae_kernels.joined_buffer(x).fill_(float("nan"))  # poisoned: each element must be written
        try:
            vae_kernels.norm_silu_join_into(x, cached, gamma, scale, joined)
            torch.cuda.synchronize()
        except Exception as exc:  # a compile or launch this Triton or GPU refuses (Triton missing, too)
            return f"the VAE's norm-and-join kernel failed ({type(exc).__name__}: {exc})"
        if not torch.isfinite(joined).all():
            return "the VAE's norm-and-join kernel left elements unwritten"
        rows = norm_silu_rows(as_rows(x), gamma, torch.tensor(scale, device="cuda"))
        expected = join_frames(from_rows(rows, x), cached).float()
        difference = float((joined.float() - expected).norm() / expected.norm())
        if not difference <= MAX_KERNEL_RELATIVE_RMS:
            return f"the VAE's norm-and-join kernel differs from the torch version by {difference:.2%} (RMS)"
    return None


def uninstall(vae: Any) -> None:
    _INSTALLED.pop(getattr(vae, "decoder", None), None)


def installed(decoder: Any) -> FusedWanDecoder | None:
    try:
        return _INSTALLED.get(decoder)
    except TypeError:  # not weakly referenceable: never installed
        return None
