"""How long a request has to go: from the step rate measured on its shape at this studio, and from its own steps
once it has run a few.

A request's own rate is measured from the first step the studio saw to the latest, so the time before its first
step (loading, compiling, the first step's warm-up) does not inflate it; until it spans a few steps, the rate of
earlier requests of its shape weighs in as that many steps would. Between two progress events the time left
counts down with the clock, down to what the steps not yet seen done still take: it neither freezes nor goes to
zero while work is left.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from studio.protocol import VideoRequest

FEW_STEPS = 3  # steps of a request's own that weigh as much as its shape's measured rate
RATE_SAMPLES = 50  # finished requests of a shape its rate averages over (the newest)


@dataclass(frozen=True)
class Shape:
    """What a step's time depends on: requests of one shape step at about the same rate."""

    width: int
    height: int
    frames: int | None  # None: the server's default
    steps: int | None

    @classmethod
    def of(cls, request: VideoRequest) -> Shape:
        return cls(request.width, request.height, request.num_frames, request.num_inference_steps)

    @property
    def work(self) -> int:
        """What a step's time grows with: the video's pixels over all its frames."""
        return self.width * self.height * (self.frames or 1)


@dataclass
class StepClock:
    """When a request's steps were seen done (fractions where the server tells only a percentage)."""

    first_done: float | None = None
    first_at: float | None = None
    done: float = 0.0
    at: float | None = None
    last_gap: float = 1.0  # steps between the last two sightings: about how far the next one will be

    def observe(self, done: float, at: float) -> None:
        """Steps `done` seen at `at`; a sighting of no new step keeps the time that step was first seen."""
        if self.first_done is None:
            self.first_done, self.first_at, self.done, self.at = done, at, done, at
            return
        if done <= self.done:
            return
        self.last_gap, self.done, self.at = done - self.done, done, at

    def span(self) -> tuple[float, float]:
        """(seconds, steps) from the first step seen to the latest: the request's own rate, warm-up left out."""
        if self.first_done is None or self.first_at is None or self.at is None:
            return 0.0, 0.0
        return self.at - self.first_at, self.done - self.first_done

    def rate_s(self) -> float | None:
        """Its own seconds per step, once it spans a few steps."""
        seconds, steps = self.span()
        return seconds / steps if steps >= FEW_STEPS else None


class StepRates:
    """Seconds per step measured on the requests this studio finished, by shape."""

    def __init__(self, samples: int = RATE_SAMPLES) -> None:
        self._samples = samples
        self._by_shape: dict[Shape, deque[float]] = {}

    def add(self, shape: Shape, seconds_per_step: float) -> None:
        if seconds_per_step > 0 and math.isfinite(seconds_per_step):
            self._by_shape.setdefault(shape, deque(maxlen=self._samples)).append(seconds_per_step)

    def rate_s(self, shape: Shape) -> tuple[float, bool] | None:
        """The shape's seconds per step and whether it was measured on that very shape. A shape never seen takes
        the measured shape nearest in work, scaled by the work (a step's time grows about with the pixels it makes;
        the step count does not change it); None before anything finished."""
        exact = self._by_shape.get(shape)
        if exact:
            return sum(exact) / len(exact), True
        if not self._by_shape:
            return None
        nearest = min(self._by_shape, key=lambda seen: abs(math.log(seen.work / shape.work)))
        rates = self._by_shape[nearest]
        return sum(rates) / len(rates) * shape.work / nearest.work, False


@dataclass(frozen=True)
class Eta:
    """A running request's time to go, as of `now`."""

    remaining_s: float | None  # None: no estimate yet (nothing of its shape measured, too few steps of its own)
    rate_s: float | None  # the seconds per step it is reckoned at
    source: str  # "own": its own steps, "shape": earlier requests of its shape, "similar": of another shape, "": none


def estimate(
    clock: StepClock, total_steps: int, started: float | None, shape_rate: tuple[float, bool] | None, now: float
) -> Eta:
    """The time to go of a request at its steps: its own rate blended with its shape's (FEW_STEPS steps' weight),
    counted down from the latest step seen. `started`: when it was first seen running."""
    seconds, steps = clock.span()
    if shape_rate is not None:
        prior, exact = shape_rate
        rate = (FEW_STEPS * prior + seconds) / (FEW_STEPS + steps)
        source = "own" if steps >= FEW_STEPS else ("shape" if exact else "similar")
    elif steps >= FEW_STEPS:
        rate, source = seconds / steps, "own"
    elif steps == 0 and clock.done >= FEW_STEPS and started is not None:
        # One sighting, a few steps in (a server polled now and then): from its start, warm-up and all.
        rate, source = ((clock.at or now) - started) / clock.done, "own"
    else:
        return Eta(None, None, "")
    left = max(0.0, total_steps - clock.done)
    since = now - (clock.at if clock.at is not None else started if started is not None else now)
    # Between sightings the clock runs down, but not past the steps the next sighting will not yet have done.
    floor = rate * max(0.0, left - clock.last_gap)
    return Eta(max(floor, rate * left - max(0.0, since)), rate, source)


def by_duration(expected_s: float, running_for: float) -> tuple[float, float]:
    """A request whose server tells no progress: (percent, seconds to go) from what its shape took, by the clock."""
    percent = min(99.0, 100.0 * running_for / expected_s) if expected_s > 0 else 0.0
    return percent, max(0.0, expected_s - running_for)
