"""Previews taken off the device without holding up the denoising loop.

The loop hands over its estimate of the clean video for the rows whose preview is due: latents (projected to RGB
by the VAE's latent RGB map, studio.engine.latent_rgb) or pixels (the small model's key frames). On a GPU the
work runs on a side stream after an event recorded on the loop's stream, and its result travels to pinned host
memory without blocking; the loop polls the copies at each step (`poll`) and passes the finished ones to the
encoder's thread. Every CUDA call stays on the device thread, so none of them can meet a CUDA graph capture
there. On a CPU the image is made, and encoded, at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from studio.engine.latent_rgb import LatentRgbMap, project
from studio.engine.previews import PreviewEncoder, PreviewTarget

log = logging.getLogger(__name__)


@dataclass
class _InFlight:
    host: torch.Tensor  # uint8 (R, H, W, 3), pinned
    ready: Any  # torch.cuda.Event recorded after the copy
    targets: list[PreviewTarget]
    step: int
    total: int


def is_flow_matching(scheduler: Any) -> bool:
    """Whether the scheduler's model predicts a flow's velocity, whose clean estimate is x0 = x_t - sigma_t * v."""
    config = getattr(scheduler, "config", {})
    return config.get("prediction_type") == "flow_prediction" or type(scheduler).__name__.startswith("FlowMatch")


def flow_sigmas(scheduler: Any) -> list[float] | None:
    """The noise level of each step of a flow-matching scheduler whose timesteps are set, as host floats; None
    where the scheduler predicts something else (no preview is made from its steps)."""
    sigmas = getattr(scheduler, "sigmas", None)
    if not is_flow_matching(scheduler) or sigmas is None:
        return None
    return [float(s) for s in torch.as_tensor(sigmas).detach().float().cpu()]


def clean_middle_frame(latents: torch.Tensor, velocity: torch.Tensor, rows: list[int], sigma: float) -> torch.Tensor:
    """The estimate of the clean latents' middle frame, (R, C, H, W), of `rows` of (B, C, F, H, W) latents and
    the step's velocity."""
    middle = latents.shape[2] // 2
    x_t, v = latents[:, :, middle], velocity[:, :, middle]
    if rows == list(range(len(rows))):
        x_t, v = x_t[: len(rows)], v[: len(rows)]
    else:  # picked on the host: an index tensor on the device would be a copy that waits for the device
        x_t, v = torch.stack([x_t[row] for row in rows]), torch.stack([v[row] for row in rows])
    return x_t.float() - sigma * v.float()


class DevicePreviews:
    """Makes the due previews of a step, on `device`, and hands them to `encoder`."""

    def __init__(self, device: str, encoder: PreviewEncoder, rgb_map: LatentRgbMap | None = None):
        self.device, self.encoder, self.rgb_map = device, encoder, rgb_map
        self._weights = self._bias = None
        if rgb_map is not None:
            self._weights, self._bias = rgb_map.tensors(device)
        self._side = torch.cuda.Stream() if device == "cuda" else None
        self._in_flight: list[_InFlight] = []

    @property
    def from_latents(self) -> bool:
        return self.rgb_map is not None

    def latents(self, clean: torch.Tensor, targets: Sequence[PreviewTarget], step: int, total: int) -> None:
        """Previews of clean latent frames (R, C, H, W), one per target."""
        if self._weights is None or self._bias is None or clean.shape[1] != self._weights.shape[1]:
            for target in targets:
                target.finished(None)
            return
        weights, bias = self._weights, self._bias
        self._make(clean, lambda source: project(source, weights, bias), targets, step, total)

    def pixels(self, frames: torch.Tensor, targets: Sequence[PreviewTarget], step: int, total: int) -> None:
        """Previews of clean frames (R, 3, H, W) in [-1, 1], one per target."""
        self._make(frames, _pixels_to_uint8, targets, step, total)

    def _make(self, source: torch.Tensor, to_rgb: Any, targets: Sequence[PreviewTarget], step: int, total: int) -> None:
        side = self._side
        if side is None or source.device.type != "cuda":
            rgb = to_rgb(source).contiguous()
            self.encoder.submit(rgb.cpu().numpy(), targets, step, total)
            return
        side.wait_stream(torch.cuda.current_stream())  # the loop's work so far: the estimate is ready
        with torch.cuda.stream(side):
            rgb = to_rgb(source).contiguous()
            host = torch.empty(rgb.shape, dtype=torch.uint8, pin_memory=True)
            host.copy_(rgb, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(side)
        source.record_stream(side)  # its memory is not reused by the loop until the side stream has read it
        self._in_flight.append(_InFlight(host, ready, list(targets), step, total))

    def poll(self) -> None:
        """Hand over the previews whose copy has arrived; never waits."""
        while self._in_flight and self._in_flight[0].ready.query():
            self._hand_over(self._in_flight.pop(0))

    def flush(self) -> None:
        """Hand over every preview still under way (at the end of a loop: the device is done with its steps); one
        that cannot be read any more (the loop failed on the device) is dropped."""
        while self._in_flight:
            done = self._in_flight.pop(0)
            try:
                done.ready.synchronize()
            except Exception:
                log.exception("a preview was lost with its step")
                for target in done.targets:
                    target.finished(None)
                continue
            self._hand_over(done)

    def _hand_over(self, done: _InFlight) -> None:
        # A host copy of its own: the pinned block goes back to torch's cache here, on the device thread.
        self.encoder.submit(done.host.numpy().copy(), done.targets, done.step, done.total)

    def warm(self, channels: int) -> None:
        """One projection now, so that the first request's preview pays for no first kernel or side stream."""
        if self.rgb_map is None or self.rgb_map.channels != channels:
            return
        probe = torch.zeros(1, channels, 2, 2, device=self.device)
        weights, bias = self._weights, self._bias
        self._make(probe, lambda source: project(source, weights, bias), [], 0, 1)
        self.flush()


def _pixels_to_uint8(frames: torch.Tensor) -> torch.Tensor:
    return ((frames.float().clamp(-1.0, 1.0) + 1.0) * 127.5).round_().to(torch.uint8).permute(0, 2, 3, 1)
