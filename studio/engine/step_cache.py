"""Step caching: fewer transformer calls per video, each skipped step's prediction estimated from the steps made.

Between neighbouring denoising steps the transformer's prediction (the guided velocity of a flow-matching model)
changes little in the middle of the schedule and much at its ends. A step cache computes the first steps, then one
step in every `interval`, and always the last `final_steps`; a skipped step takes an estimate of the prediction
from the computed steps before it:
- `reuse`: the last computed prediction as it was (a first-order hold, as FORA and DeepCache reuse features);
- `taylor`: the line through the last two computed predictions, evaluated at the step's timestep (a first-order
  Taylor step in t, as TaylorSeer forecasts features).

The schedule is fixed before the loop from the step count alone, not decided from the tensors as TeaCache,
MagCache or a first-block cache decide: a decision from the tensors needs the device to answer the host at every
step, and it would cut the transformer's CUDA graph in two. A fixed schedule keeps one graph per shape, keeps the
host ahead of the device, and gives every request of a batch (they share one step count) the same steps.

Off by default: the engine's default stays exact (every step computed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, get_args

from studio.engine_levers import StepCacheName

if TYPE_CHECKING:
    import torch

# The modes (OFF, REUSE, TAYLOR), named where the settings and the wire contract name them.
StepCacheMode = StrEnum("StepCacheMode", [(name.upper(), name) for name in get_args(StepCacheName)])


@dataclass(frozen=True)
class StepCachePolicy:
    """Which steps a step cache computes, and how it estimates the others."""

    mode: StepCacheMode = StepCacheMode.OFF
    interval: int = 2  # after the first steps, one step computed in every `interval`
    warm_fraction: float = 0.2  # this share of the steps, from the first, always computed
    final_steps: int = 1  # the last steps always computed (they shape the finest detail)

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise ValueError(f"the step cache's interval must be at least 1, got {self.interval}")
        if not 0.0 <= self.warm_fraction <= 1.0:
            raise ValueError(f"the step cache's warm fraction must be from 0 to 1, got {self.warm_fraction}")
        if self.final_steps < 0:
            raise ValueError(f"the step cache's final steps must be at least 0, got {self.final_steps}")

    @property
    def active(self) -> bool:
        return self.mode is not StepCacheMode.OFF and self.interval > 1

    def computed(self, total: int) -> list[bool]:
        """For each of `total` steps, whether the transformer runs at it. At least two steps are computed where
        there are two, so that `taylor` has a line to draw."""
        if not self.active:
            return [True] * total
        warm = max(2, math.ceil(self.warm_fraction * total))
        final_from = total - self.final_steps
        return [
            index < warm or index >= final_from or (index - warm) % self.interval == self.interval - 1
            for index in range(total)
        ]

    def computed_count(self, total: int) -> int:
        return sum(self.computed(total))

    def label(self) -> str:
        """How a sidecar and a bench report name it."""
        if not self.active:
            return "off"
        return f"{self.mode.value}, every {self.interval}, first {self.warm_fraction:g}, last {self.final_steps}"


def parse_policy(
    value: str | None, interval: int = 2, warm_fraction: float = 0.2, final_steps: int = 1
) -> StepCachePolicy:
    """A policy from its mode's name (a flag's or an extra_params key's value); ValueError naming the choices."""
    text = (value or "off").strip().lower()
    try:
        mode = StepCacheMode(text)
    except ValueError:
        choices = ", ".join(mode.value for mode in StepCacheMode)
        raise ValueError(f"step cache must be one of {choices}, got {str(value)[:40]!r}") from None
    return StepCachePolicy(mode, interval, warm_fraction, final_steps)


class StepCache:
    """One batch's cache over its denoising loop: asked at each step whether to compute, given each computed
    prediction, and asked for the estimate at each skipped one."""

    def __init__(self, policy: StepCachePolicy, total: int):
        self.policy = policy
        self.plan = policy.computed(total)
        self._points: list[tuple[float, torch.Tensor]] = []  # the last two computed (timestep, prediction)

    def computes(self, index: int) -> bool:
        return self.plan[index] or not self._points

    def keep(self, timestep: torch.Tensor | float, prediction: torch.Tensor) -> None:
        """A computed step's prediction (kept as is: the loop makes a new tensor at each step)."""
        self._points = [*self._points[-1:], (float(timestep), prediction)]

    def estimate(self, timestep: torch.Tensor | float) -> torch.Tensor:
        """The prediction at a skipped step's timestep."""
        t_last, last = self._points[-1]
        if self.policy.mode is StepCacheMode.REUSE or len(self._points) < 2:
            return last
        t_before, before = self._points[0]
        if t_last == t_before:
            return last
        slope = (float(timestep) - t_last) / (t_last - t_before)  # in units of the last computed interval
        return last + slope * (last - before)
