"""`OmniSmallT2VPipeline`: the small pixel-space text-to-video model as a diffusers pipeline.

It samples the denoiser's key frames (9) by rectified flow on a small canvas picked from the requested aspect ratio
(short side 24 px: 40x24 for 16:9, 24x24 for 1:1, 32x24 for 4:3, 24x40 for 9:16), then has the field draw every
requested frame from the finished key frames on a canvas `draw_scale` times larger (80x48 for 16:9): the frames
between key frames are the motion itself and edges are drawn at that size, not blended or blown up. It returns
that native size; the caller resizes (the engine's runner does, and records the native size in the job and its
sidecar). The seed draws the noise and the scene's placement (a small shift of the whole scene).

    pipe = OmniSmallT2VPipeline.from_pretrained("assets/omni-small-t2v")
    out = pipe("a red circle moving left on white", width=448, height=256, num_frames=33)
    out.frames.shape, out.native_size   # (1, 33, 48, 80, 3), (80, 48)

The model was trained without empty prompts, so it takes no classifier-free guidance and no negative prompt;
the runner passes only the arguments a pipeline's `__call__` names. A step callback may ask for "clean" besides
"latents": the denoiser's estimate of the finished key frames at that step, (B, 3, 9, H, W) in [-1, 1], which
the engine's previews show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from diffusers import DiffusionPipeline, FlowMatchEulerDiscreteScheduler
from diffusers.utils import BaseOutput
from diffusers.utils.torch_utils import randn_tensor

from studio.smallmodel.clips import sample_placements
from studio.smallmodel.field import OmniFieldDenoiser
from studio.smallmodel.text import OmniTextEncoder

DEFAULT_STEPS = 8  # what the model was tuned for; the engine passes the request's step count


@dataclass
class OmniSmallT2VPipelineOutput(BaseOutput):
    """frames: (B, T, H, W, 3) floats in [0, 1] for "np", (B, T, 3, H, W) for "pt", lists of PIL images for "pil";
    native_size: (width, height) the frames were made at."""

    frames: np.ndarray | torch.Tensor | list
    native_size: tuple[int, int]


def native_size_for(width: int, height: int, short_side: int, long_side_max: int) -> tuple[int, int]:
    """(width, height) of the model's native canvas for a requested size: the short side fixed, the long side
    following the aspect ratio up to `long_side_max`."""
    width, height = max(1, int(width)), max(1, int(height))
    ratio = max(width, height) / min(width, height)
    long_side = max(short_side, min(long_side_max, round(short_side * ratio)))
    return (long_side, short_side) if width >= height else (short_side, long_side)


class OmniSmallT2VPipeline(DiffusionPipeline):
    """Text-to-video with the Omni Studio small model (pixel space, rectified flow, clean-clip prediction)."""

    model_cpu_offload_seq = "text_encoder->transformer"
    _callback_tensor_inputs: ClassVar[list[str]] = ["latents", "clean"]
    # Pixel space: no VAE, one pixel per position.
    vae_scale_factor_spatial = 1
    vae_scale_factor_temporal = 1

    def __init__(
        self,
        text_encoder: OmniTextEncoder,
        transformer: OmniFieldDenoiser,
        scheduler: FlowMatchEulerDiscreteScheduler,
        native_short_side: int = 24,
        native_long_side_max: int = 40,
        draw_scale: int = 2,
    ) -> None:
        super().__init__()
        self.register_modules(text_encoder=text_encoder, transformer=transformer, scheduler=scheduler)
        self.register_to_config(
            native_short_side=native_short_side, native_long_side_max=native_long_side_max, draw_scale=draw_scale
        )

    def key_size(self, width: int | None, height: int | None) -> tuple[int, int]:
        """(width, height) of the key frames the flow samples for a requested size."""
        return native_size_for(
            width or 448, height or 256, self.config.native_short_side, self.config.native_long_side_max
        )

    def native_size(self, width: int | None, height: int | None) -> tuple[int, int]:
        """(width, height) the model makes (draws its frames at) for a requested size."""
        key_w, key_h = self.key_size(width, height)
        return key_w * self.config.draw_scale, key_h * self.config.draw_scale

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str] | None = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int = 33,
        num_inference_steps: int = DEFAULT_STEPS,
        num_videos_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        latents: torch.Tensor | None = None,
        output_type: str = "np",
        return_dict: bool = True,
        callback_on_step_end=None,
        callback_on_step_end_tensor_inputs: list[str] | tuple[str, ...] = ("latents",),
    ):
        prompts = [prompt] if isinstance(prompt, str) or prompt is None else list(prompt)
        prompts = [p or "" for p in prompts for _ in range(num_videos_per_prompt)]
        if num_frames < 1:
            raise ValueError(f"num_frames must be at least 1, got {num_frames}")
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be at least 1, got {num_inference_steps}")
        for name in callback_on_step_end_tensor_inputs:
            if name not in self._callback_tensor_inputs:
                raise ValueError(f"callback tensor input {name!r} not in {self._callback_tensor_inputs}")
        device = self._execution_device
        denoiser = self.transformer
        key_w, key_h = self.key_size(width, height)
        native_w, native_h = self.native_size(width, height)
        shape = (len(prompts), denoiser.config.in_channels, denoiser.config.num_frames, key_h, key_w)
        if latents is None:
            latents = randn_tensor(shape, generator=generator, device=device, dtype=torch.float32)
        else:
            latents = latents.to(device=device, dtype=torch.float32)
        generators = generator if isinstance(generator, list) else [generator] * len(prompts)
        placement = torch.cat([sample_placements(1, g) for g in generators]).to(device, denoiser.dtype)
        states, mask = self.text_encoder.encode(prompts, device)
        states = states.to(denoiser.dtype)

        # Evenly spaced noise levels from 1 (the scheduler applies its shift, 1 unless a request sets one).
        sigmas = np.linspace(1.0, 0.0, num_inference_steps + 1)[:-1]
        self.scheduler.set_timesteps(sigmas=sigmas.tolist(), device=device)
        scale = float(self.scheduler.config.num_train_timesteps)
        with self.progress_bar(total=num_inference_steps) as progress:
            for i, t in enumerate(self.scheduler.timesteps):
                sigma = (t / scale).to(device=device, dtype=torch.float32).reshape(1)
                clean = denoiser(latents.to(denoiser.dtype), sigma, states, mask, placement=placement).float()
                # x_s = (1 - s) x0 + s noise, so the flow's velocity is (x_s - x0) / s.
                velocity = (latents - clean) / sigma.view(1, 1, 1, 1, 1).clamp(min=1e-4)
                latents = self.scheduler.step(velocity, t, latents, return_dict=False)[0]
                if callback_on_step_end is not None:
                    available = {"latents": latents, "clean": clean}
                    values = {name: available[name] for name in callback_on_step_end_tensor_inputs}
                    outputs = callback_on_step_end(self, i, t, values) or {}
                    latents = outputs.get("latents", latents)
                progress.update()

        # The flow ends on the clean key frames (noise level 0); from them the field draws every requested frame
        # on the native canvas: (B, 3, T, H, W) in [-1, 1] -> (B, T, H, W, 3) in [0, 1].
        drawn = denoiser(
            latents.to(denoiser.dtype),
            torch.zeros(1, device=device),
            states,
            mask,
            placement=placement,
            grid=(num_frames, native_h, native_w),
        ).float()
        video = ((drawn.clamp(-1.0, 1.0) + 1.0) / 2.0).permute(0, 2, 3, 4, 1)
        self.maybe_free_model_hooks()
        if output_type == "pt":
            frames = video.permute(0, 1, 4, 2, 3).contiguous()
        elif output_type == "pil":
            from PIL import Image

            arrays = (video * 255.0 + 0.5).to(torch.uint8).cpu().numpy()
            frames = [[Image.fromarray(frame) for frame in clip] for clip in arrays]
        else:
            frames = video.cpu().numpy()
        if not return_dict:
            return (frames,)
        return OmniSmallT2VPipelineOutput(frames=frames, native_size=(native_w, native_h))


def build_pipeline(
    vocab: list[str], denoiser: dict | None = None, text: dict | None = None, pipeline: dict | None = None
) -> OmniSmallT2VPipeline:
    """A fresh (untrained) pipeline from configs."""
    text_encoder = OmniTextEncoder(vocab=list(vocab), **(text or {}))
    transformer = OmniFieldDenoiser(**{"text_dim": text_encoder.config.dim, **(denoiser or {})})
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    return OmniSmallT2VPipeline(
        text_encoder=text_encoder, transformer=transformer, scheduler=scheduler, **(pipeline or {})
    )
