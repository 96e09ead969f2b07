"""The engine's own denoising loop over a Wan-style pipeline (a text encoder, one transformer, a scheduler and a
VAE), for a batch of requests of one shape.

Several requests share each transformer call, with the conditional and unconditional halves of
classifier-free guidance in the same batch. The pipeline's own pieces are used (prompt encoding, latents from
each request's seed as the pipeline draws them, scheduler, VAE), so a request makes the same video alone or in
a batch, and the same as the plain pipeline call.

On several ranks (studio.engine.parallel) every rank runs this loop on the same batch, in step: with guidance
split, each runs one half and the halves are exchanged after each transformer call; with tokens split, the
transformer itself exchanges them. Every rank then holds the same latents; each decodes a strip of the frames
(studio.engine.parallel.split_decode), or rank 0 decodes alone; rank 0 answers.

Previews (studio.engine.preview_device): at a step where a request's preview is due, the loop takes the
scheduler's estimate of the clean latents' middle frame (flow matching: x0 = x_t - sigma_t * v) and hands it
over; the projection to RGB runs on a side stream, outside the transformer's CUDA graphs, and the loop never
waits for it. Rank 0 alone makes them (the other ranks' requests have no preview targets).

The host stays at most one step ahead of the device (`StepProgress`), so that a cancel is seen within a step
whatever the scheduler: some schedulers' steps wait for the device anyway, others would let the host queue the
whole loop before the device has run its first step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from studio.engine.batching import BatchBuckets
from studio.engine.generation_types import BatchItem, GenerationCancelled, ResultCallback
from studio.engine.gpu.gpu_setup import GpuSetup
from studio.engine.loader import PipelineFacts
from studio.engine.parallel.rank import ParallelRank
from studio.engine.preview_device import DevicePreviews, clean_middle_frame, flow_sigmas
from studio.engine.prompts import PromptEmbeddings
from studio.engine.step_cache import StepCache
from studio.engine.vae_decode import decode_batch


@dataclass(frozen=True)
class TransformerForward:
    """The pipeline's transformer as the loop calls it, looked up at each call (compile may replace it)."""

    pipe: Any

    def __call__(self, hidden_states: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        return self.pipe.transformer(
            hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=context, return_dict=False
        )[0]


@dataclass
class BatchedDenoiser:
    """Runs a batch of requests of one batch key through the pipeline's pieces, step by step."""

    pipe: Any
    facts: PipelineFacts
    device: str
    prompts: PromptEmbeddings
    buckets: BatchBuckets
    gpu: GpuSetup
    forward: TransformerForward
    rank: ParallelRank | None = None  # this process's rank where a request runs on several
    previews: DevicePreviews | None = None  # where requests' previews are made (rank 0, a VAE with a map)

    def __call__(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        """`on_result(i, output or exception)` once per item, as soon as that item is done; a cancelled item is
        answered at once and the others go on."""
        count = len(items)
        native_size = self.facts.native_size(items[0].params.width, items[0].params.height)
        started = time.perf_counter()
        alive = [True] * count

        def drop_cancelled() -> bool:
            for i, item in enumerate(items):
                if alive[i] and item.stopped():
                    alive[i] = False
                    on_result(i, GenerationCancelled())
            return any(alive)

        # 1. Check inputs: cancelled requests leave before any work; the other ranks are told the batch.
        if not drop_cancelled():
            return
        rank = self.rank
        if rank is not None:
            rank.tell("batch", [item.params for item in items])
        try:
            latents = self._denoise(items, drop_cancelled, alive)
        except BaseException as exc:
            if rank is not None:
                rank.fail(f"a batch failed part-way ({type(exc).__name__}): the ranks are out of step")
            raise
        if latents is None:
            return
        if rank is not None and not (rank.is_leader or rank.splits_decode):
            return  # the leader decodes alone; this rank goes on to the next batch
        denoise_end = time.perf_counter()
        # 6. Decode, handing frames over as they come (no autograd: the latents are inference tensors); on
        # every rank where the ranks split it, each a strip of the frames.
        decode_rank = rank if rank is not None and rank.splits_decode else None
        try:
            with torch.inference_mode():
                decode_batch(
                    self.pipe.vae,
                    items,
                    latents,
                    alive,
                    on_result,
                    native_size,
                    self.device,
                    started,
                    denoise_end,
                    decode_rank,
                )
        except BaseException as exc:
            if decode_rank is not None:
                decode_rank.fail(f"a decode failed part-way ({type(exc).__name__}): the ranks are out of step")
            raise

    def _denoise(
        self, items: Sequence[BatchItem], drop_cancelled: Callable[[], bool], alive: list[bool]
    ) -> torch.Tensor | None:
        """Steps 2 to 5: the denoised latents of the batch (padding rows dropped is the decoder's business),
        or None where every request was cancelled on the way."""
        pipe, device, count, rank = self.pipe, self.device, len(items), self.rank
        first = items[0].params
        native_w, native_h = self.facts.native_size(first.width, first.height)
        total = first.num_inference_steps
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        transformer = pipe.transformer
        cfg = first.guidance_scale > 1.0
        guidance = first.guidance_scale
        # With guidance split across ranks, this rank runs one half: the conditional rows or the others.
        split = cfg and rank is not None and rank.splits_guidance
        with torch.inference_mode():
            # 2. Encode prompts: the conditional rows, then the unconditional ones, each padded to the bucket.
            padding = self.buckets.padded(count, self.gpu.static_shapes) - count  # rows that keep the shape static
            positive = [item.params.prompt for item in items]
            negative = [item.params.negative_prompt or "" for item in items]
            if split:
                assert rank is not None
                context = _pad_rows(self._embed(positive if rank.runs_conditional else negative), padding)
            else:
                context = _pad_rows(self._embed(positive), padding)
                if cfg:
                    context = torch.cat([context, _pad_rows(self._embed(negative), padding)])
            # 3. Prepare latents: each request's own, from its seed, as the pipeline draws them.
            channels = transformer.config.in_channels
            latents = torch.cat(
                [
                    pipe.prepare_latents(
                        1,
                        channels,
                        native_h,
                        native_w,
                        item.params.num_frames,
                        torch.float32,
                        device,
                        torch.Generator(device="cpu").manual_seed(item.params.seed),
                    )
                    for item in items
                ]
            )
            latents = _pad_rows(latents, padding)
            # 4. Prepare timesteps.
            scheduler = self.facts.new_scheduler(first.flow_shift)
            scheduler.set_timesteps(total, device=device)
            if hasattr(scheduler, "set_begin_index"):
                scheduler.set_begin_index(0)  # no device-to-host read of the timestep in step()
            # 5. Denoise.
            steps_done = StepProgress(device, total, items, alive)
            previews = self.previews if any(item.preview is not None for item in items) else None
            sigmas = flow_sigmas(scheduler) if previews is not None else None
            # A step cache skips the transformer at some steps (the same ones on every rank: the schedule comes
            # from the batch's parameters); its timesteps are read to the host once, not at each step.
            cache = StepCache(first.step_cache, total) if first.step_cache.active else None
            host_timesteps = scheduler.timesteps.tolist() if cache is not None else None
            try:
                for index, t in enumerate(scheduler.timesteps):
                    if cache is None or cache.computes(index):
                        model_input = latents.to(transformer.dtype)
                        if cfg and not split:
                            model_input = torch.cat([model_input, model_input])
                        forward = self.gpu.graphs or self.forward
                        out = forward(model_input, t.expand(model_input.shape[0]), context)
                        if cfg:
                            cond, uncond = rank.gather_guidance(out) if split and rank is not None else out.chunk(2)
                            out = uncond + guidance * (cond - uncond)
                        if cache is not None and host_timesteps is not None:
                            cache.keep(host_timesteps[index], out)
                    else:
                        assert host_timesteps is not None
                        out = cache.estimate(host_timesteps[index])
                    if previews is not None and sigmas is not None:
                        _preview_step(previews, items, alive, latents, out, sigmas[index], index + 1, total)
                    latents = scheduler.step(out, t, latents, return_dict=False)[0]
                    steps_done.step_queued()
                    if previews is not None:
                        previews.poll()
                    go_on = drop_cancelled()
                    if rank is not None:
                        go_on = rank.agree(go_on)
                    if not go_on:
                        return None
                steps_done.finish()
            finally:
                if previews is not None:
                    previews.flush()
        return latents

    def _embed(self, texts: list[str]) -> torch.Tensor:
        return self.prompts.embed(self.pipe, texts, self.facts.max_sequence_length, self.device)


def _preview_step(
    previews: DevicePreviews,
    items: Sequence[BatchItem],
    alive: list[bool],
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: float,
    step: int,
    total: int,
) -> None:
    """Hand over the clean estimate of the rows whose preview is due at this step."""
    due = [i for i, item in enumerate(items) if alive[i] and item.preview is not None and item.preview.due(step, total)]
    if due:
        targets = [target for i in due if (target := items[i].preview) is not None]
        previews.latents(clean_middle_frame(latents, velocity, due, sigma), targets, step, total)


# Steps the host may queue before the device has finished them: one, so that the device always has the next
# step to run while the host prepares the one after, and a cancel is seen within a step.
MAX_LEAD_STEPS = 1


class StepProgress:
    """Reports denoising steps to each live item as the device finishes them: on a GPU each step records an
    event that is polled, and the host waits for the oldest only when it is more than MAX_LEAD_STEPS ahead."""

    def __init__(
        self,
        device: str,
        total: int,
        items: Sequence[BatchItem],
        alive: list[bool],
        new_event: Callable[[], Any] | None = None,  # torch.cuda.Event; another where a test stands in the device
    ):
        self.device, self.total, self.items, self.alive = device, total, items, alive
        self.new_event = new_event or torch.cuda.Event
        self.queued: list[Any] = []
        self.reported = 0

    def step_queued(self) -> None:
        if self.device == "cuda":
            event = self.new_event()
            event.record()
            self.queued.append(event)
            while self.queued and (len(self.queued) > MAX_LEAD_STEPS or self.queued[0].query()):
                self.queued.pop(0).synchronize()  # at once where query() said it is done
                self._report()
        else:
            self._report()

    def finish(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
        for _ in self.queued:
            self._report()
        self.queued.clear()

    def _report(self) -> None:
        self.reported += 1
        for i, item in enumerate(self.items):
            if self.alive[i] and item.on_step is not None:
                item.on_step(self.reported, self.total)


def _pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    if rows <= 0:
        return tensor
    return torch.cat([tensor, tensor[:1].expand(rows, *tensor.shape[1:])])
