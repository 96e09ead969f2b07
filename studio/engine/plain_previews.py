"""Previews of a request that runs through its pipeline's own `__call__` (studio.engine.plain_call), taken from
its step callback: the project's small model hands over its estimate of the clean key frames ("clean"); a Wan
pipeline's call has its scheduler's step wrapped, so that the callback finds the step's latents and velocity
(x0 = x_t - sigma_t * v). Any other pipeline makes no previews."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from studio.engine.preview_device import DevicePreviews, clean_middle_frame, flow_sigmas, is_flow_matching
from studio.engine.previews import PreviewTarget


class KeyFramePreviews:
    """The middle key frame of the pipeline's own estimate of the clean key frames, as pixels."""

    tensor_inputs = ("latents", "clean")

    def __init__(self, previews: DevicePreviews, target: PreviewTarget):
        self.previews, self.target = previews, target

    def attach(self, scheduler: Any) -> None:
        """Nothing to wrap: the callback has what it needs."""

    def step(self, step: int, total: int, tensors: dict[str, Any]) -> None:
        clean = tensors.get("clean")
        if clean is not None and self.target.due(step, total):
            self.previews.pixels(clean[:1, :, clean.shape[2] // 2], [self.target], step, total)
        self.previews.poll()


class SchedulerTapPreviews:
    """The middle latent frame of the scheduler's clean estimate, projected by the VAE's latent RGB map."""

    tensor_inputs = ("latents",)

    def __init__(self, previews: DevicePreviews, target: PreviewTarget):
        self.previews, self.target = previews, target
        self._scheduler: Any = None
        self._latest: tuple[torch.Tensor, torch.Tensor] | None = None
        self._calls = 0
        self._sigmas: list[float] | None = None

    def attach(self, scheduler: Any) -> None:
        """Wrap this scheduler's step (a fresh one per request) to keep its latest latents and velocity."""
        original: Callable[..., Any] = scheduler.step

        def step(model_output: torch.Tensor, timestep: Any, sample: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self._latest = (sample, model_output)
            self._calls += 1
            return original(model_output, timestep, sample, *args, **kwargs)

        self._scheduler = scheduler
        scheduler.step = step

    def step(self, step: int, total: int, tensors: dict[str, Any]) -> None:
        if self._latest is not None and self._calls > 0 and self.target.due(step, total):
            if self._sigmas is None:  # once the pipeline has set the scheduler's timesteps
                self._sigmas = flow_sigmas(self._scheduler) or []
            index = self._calls - 1  # the pipelines that take this path set the scheduler's begin index to 0
            if index < len(self._sigmas):
                sample, velocity = self._latest
                clean = clean_middle_frame(sample, velocity, [0], self._sigmas[index])
                self.previews.latents(clean, [self.target], step, total)
            else:
                self.target.finished(None)
        self._latest = None
        self.previews.poll()


PlainPreviews = KeyFramePreviews | SchedulerTapPreviews


def plain_previews(
    pipe: Any, call_parameters: frozenset[str], previews: DevicePreviews | None, target: PreviewTarget | None
) -> PlainPreviews | None:
    """How a plain call of this pipeline makes its previews, or None where it makes none."""
    if previews is None or target is None or "callback_on_step_end" not in call_parameters:
        return None
    if "clean" in getattr(pipe, "_callback_tensor_inputs", ()):
        return KeyFramePreviews(previews, target)
    if previews.from_latents and is_flow_matching(pipe.scheduler):
        return SchedulerTapPreviews(previews, target)
    return None
