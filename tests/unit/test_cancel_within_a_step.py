"""A cancel stops the denoising within one step: the engine's batched loop (the tiny Wan) and a pipeline's own loop
(the small model) both look at the request's cancel after every step, and report no step after it; on a GPU the
host never runs more than a step ahead of the device, so that it looks in time."""

from __future__ import annotations

import threading

import pytest

from studio.config import SMALL_MODEL_DIR, TINY_WAN_DIR
from studio.engine.denoise import MAX_LEAD_STEPS, StepProgress
from studio.engine.generation_types import BatchItem, GenerationCancelled, GenerationParams
from studio.engine.generator import VideoGenerator


@pytest.mark.parametrize("model", [SMALL_MODEL_DIR, TINY_WAN_DIR], ids=["small-model", "tiny-wan"])
def test_a_cancel_during_a_step_stops_the_loop_before_the_next(model):
    generator = VideoGenerator(str(model), device="cpu", threads=1)
    generator.load()
    cancel, steps = threading.Event(), []

    def on_step(done: int, total: int) -> None:
        steps.append(done)
        if done == 3:
            cancel.set()  # as a DELETE during step 3 does

    params = GenerationParams(
        prompt="a red circle moving left",
        width=128,
        height=80,
        num_frames=9,
        num_inference_steps=20,
        guidance_scale=5.0,
        seed=0,
    )
    with pytest.raises(GenerationCancelled):
        generator.generate(params, on_step=on_step, should_stop=cancel.is_set)
    assert steps == [1, 2, 3]


class SlowDeviceEvent:
    """A CUDA event of a device that finishes nothing until the host waits for it."""

    def __init__(self) -> None:
        self.done = False

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


def test_on_a_gpu_the_host_stays_at_most_one_step_ahead_of_the_device():
    reported: list[int] = []
    item = BatchItem(GenerationParams("p", 64, 64, 5, 10, 1.0, 0), on_step=lambda done, total: reported.append(done))
    progress = StepProgress("cuda", 10, [item], [True], new_event=SlowDeviceEvent)
    for queued in range(1, 6):
        progress.step_queued()
        # Every step but the last MAX_LEAD_STEPS was waited for, and reported, before the host went on.
        assert len(progress.queued) == MAX_LEAD_STEPS == 1
        assert reported == list(range(1, queued))
