"""Previews: when one is due, its size and image, the latent RGB map (its fit recovers a linear decoder, its
fingerprint names one VAE, its file round-trips), the clean estimate the loop takes, and the jobs of engines made
in-process: the small model's key frames, the tiny Wan's batched loop and plain call, each job of a batch its own,
none where the server or the request turned them off, and rank 0 alone where a request runs on two ranks."""

from __future__ import annotations

import io
import json
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from studio.config import TINY_WAN_DIR
from studio.engine.generation_types import BatchItem, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.jobs import JobManager
from studio.engine.latent_rgb import LATENT_RGB_DIR, LatentRgbMap, find_map, project, vae_fingerprint
from studio.engine.latent_rgb_fit import latent_grid, least_squares, procedural_clips, vae_samples
from studio.engine.metrics import EngineMetrics
from studio.engine.parallel import ParallelSettings
from studio.engine.preview_device import DevicePreviews, clean_middle_frame, flow_sigmas
from studio.engine.previews import (
    PreviewEncoder,
    PreviewImage,
    PreviewSettings,
    PreviewTarget,
    encode_image,
    preview_size,
)
from studio.protocol import EngineExtraParams, PreviewEvent

# --- cadence, size, image ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_preview_is_due_once_per_interval_never_twice_at_once_and_always_at_the_last_step():
    clock, delivered = Clock(), []
    target = PreviewTarget(320, 180, 0.5, delivered.append, clock=clock)
    assert target.due(1, 10)  # the first step
    clock.now += 1.0
    assert not target.due(2, 10)  # the first is still being made
    target.finished(PreviewImage(1, 10, b"x"))
    assert delivered and delivered[0].step == 1
    assert target.due(3, 10)
    target.finished(None)  # dropped: nothing delivered, the next may come
    assert len(delivered) == 1
    clock.now += 0.2
    assert not target.due(4, 10)  # within the interval
    clock.now += 0.31
    assert target.due(5, 10)
    assert target.due(10, 10)  # the last step: even with one under way and within the interval


def test_a_preview_keeps_the_jobs_aspect_and_a_small_long_side():
    assert preview_size(1280, 720) == (192, 108)
    assert preview_size(480, 832) == (111, 192)
    assert preview_size(64, 64) == (64, 64)  # never larger than the video
    frame = np.zeros((24, 40, 3), dtype=np.uint8)
    frame[:, 20:] = (255, 0, 0)
    image = Image.open(io.BytesIO(encode_image(frame, (192, 108))))
    assert image.format == "WEBP" and image.size == (192, 108)
    pixel = image.convert("RGB").getpixel((180, 50))
    assert isinstance(pixel, tuple) and pixel[0] > 200 and pixel[2] < 60
    url = PreviewImage(3, 8, encode_image(frame, (40, 24))).data_url()
    assert PreviewEvent(step=3, image=url).image.startswith("data:image/webp;base64,")


def test_the_encoder_hands_each_row_to_its_own_target():
    got: dict[str, PreviewImage] = {}
    done = threading.Event()

    def deliver_to(name: str):
        def deliver(image: PreviewImage) -> None:
            got[name] = image
            if len(got) == 2:
                done.set()

        return deliver

    encoder = PreviewEncoder()
    frames = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    frames[1] = 255
    targets = [PreviewTarget(160, 90, 0, deliver_to("wide")), PreviewTarget(90, 160, 0, deliver_to("tall"))]
    for target in targets:
        assert target.due(4, 9)
    encoder.submit(frames, targets, 4, 9)
    assert done.wait(10)
    wide, tall = (Image.open(io.BytesIO(got[name].data)) for name in ("wide", "tall"))
    assert wide.size == (160, 90) and tall.size == (90, 160)
    assert got["tall"].step == 4 and got["tall"].total_steps == 9
    assert tall.convert("L").getpixel((40, 80)) > 240
    encoder.shutdown()


# --- the latent RGB map --------------------------------------------------------------------------------------


class LinearDecoderVae(torch.nn.Module):
    """A VAE whose decoder is exactly linear per latent (RGB levels = A @ normalised z + b, held over the frames
    and pixels the latent covers), and whose encoder gives latents of every direction."""

    def __init__(self, weights: torch.Tensor, bias: torch.Tensor, mean: list[float], std: list[float]):
        super().__init__()
        self.weights, self.bias = weights, bias
        self.config = SimpleNamespace(
            z_dim=weights.shape[1],
            latents_mean=mean,
            latents_std=std,
            scale_factor_temporal=4,
            scale_factor_spatial=8,
        )
        self.generator = torch.Generator().manual_seed(3)

    device = torch.device("cpu")
    dtype = torch.float32

    def encode(self, video: torch.Tensor) -> SimpleNamespace:
        b, _, t, h, w = video.shape
        z = torch.rand(b, self.config.z_dim, (t - 1) // 4 + 1, h // 8, w // 8, generator=self.generator) * 2 - 1
        z = z * torch.tensor(self.config.latents_std).view(1, -1, 1, 1, 1) + torch.tensor(
            self.config.latents_mean
        ).view(1, -1, 1, 1, 1)
        return SimpleNamespace(latent_dist=SimpleNamespace(mode=lambda: z))

    def decode(self, z: torch.Tensor, return_dict: bool = False) -> tuple[torch.Tensor]:
        mean = torch.tensor(self.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(self.config.latents_std).view(1, -1, 1, 1, 1)
        levels = torch.einsum("bcthw,kc->bkthw", (z - mean) / std, self.weights) + self.bias.view(1, 3, 1, 1, 1)
        frames = torch.cat([levels[:, :, :1], levels[:, :, 1:].repeat_interleave(4, dim=2)], dim=2)
        pixels = frames.repeat_interleave(8, dim=3).repeat_interleave(8, dim=4)
        return (pixels / 127.5 - 1.0,)


def test_the_fit_recovers_a_linear_decoder():
    g = torch.Generator().manual_seed(0)
    weights = (torch.rand(3, 16, generator=g) * 2 - 1) * 4  # within the levels' range: no clipping
    bias = torch.tensor([120.0, 128.0, 135.0])
    vae = LinearDecoderVae(weights, bias, mean=[0.1 * c for c in range(16)], std=[0.5 + 0.1 * c for c in range(16)])
    latents, rgb = vae_samples(vae, procedural_clips(count=2, frames=9, width=64, height=64))
    assert latents.shape == (2 * 3 * 8 * 8, 16) and rgb.shape == (2 * 3 * 8 * 8, 3)
    fit = least_squares(latents, rgb)
    assert torch.allclose(fit.weights, weights, atol=1e-3)
    assert torch.allclose(fit.bias, bias, atol=1e-3)
    assert fit.rmse < 1e-3 and fit.samples == len(latents)


def test_the_latent_grid_averages_what_each_latent_covers():
    video = torch.zeros(1, 3, 9, 16, 16)
    video[:, :, 1:5] = 4.0  # latent frame 1 covers frames 1-4
    video[:, :, 5:, :8, :8] = 8.0  # latent frame 2, its first 8x8 block
    grid = latent_grid(video, latent_frames=3, temporal=4, spatial=8)
    assert grid.shape == (1, 3, 3, 2, 2)
    assert float(grid[0, 0, 0].max()) == 0.0 and float(grid[0, 0, 1].min()) == 4.0
    assert float(grid[0, 0, 2, 0, 0]) == 8.0 and float(grid[0, 0, 2, 1, 1]) == 0.0


def test_the_map_file_round_trips_and_projects_as_written():
    rgb_map = LatentRgbMap(
        weights=[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], bias=[10.0, 20.0, 30.0], rmse=1.5, fingerprint="abc", note="n"
    )
    assert LatentRgbMap.from_json(rgb_map.to_json()) == rgb_map
    json.loads(rgb_map.to_json())  # plain JSON
    weights, bias = rgb_map.tensors("cpu")
    latents = torch.tensor([[[[5.0]], [[7.0]]]])  # (1, 2, 1, 1)
    assert project(latents, weights, bias).tolist() == [[[[15, 34, 42]]]]
    with pytest.raises(ValueError):
        LatentRgbMap.from_json(json.dumps({"format": 99, "weights": [], "bias": [], "fingerprint": ""}))


@pytest.fixture(scope="module")
def tiny_wan_vae():
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan.from_pretrained(TINY_WAN_DIR, subfolder="vae", torch_dtype=torch.float32).eval()


def test_the_fingerprint_names_one_vae_in_either_precision(tiny_wan_vae):
    import copy

    fingerprint = vae_fingerprint(tiny_wan_vae)
    assert vae_fingerprint(copy.deepcopy(tiny_wan_vae).to(torch.bfloat16)) == fingerprint
    changed = copy.deepcopy(tiny_wan_vae)
    with torch.no_grad():
        next(changed.parameters()).add_(1.0)
    assert vae_fingerprint(changed) != fingerprint


def test_the_committed_map_is_tiny_wans_and_says_it_is_a_proxy(tiny_wan_vae):
    found = find_map(vae_fingerprint(tiny_wan_vae), [LATENT_RGB_DIR])
    assert found is not None
    rgb_map, path = found
    assert path.name == "tiny-wan.json" and rgb_map.channels == 16
    assert "random weights" in rgb_map.note and "proxy" in rgb_map.note
    assert 0 <= rgb_map.rmse < 255


# --- the loop's clean estimate -------------------------------------------------------------------------------


def test_the_clean_estimate_is_the_middle_frame_of_x_minus_sigma_v_for_the_rows_asked():
    latents = torch.randn(3, 4, 5, 2, 2)
    velocity = torch.randn(3, 4, 5, 2, 2, dtype=torch.bfloat16)
    clean = clean_middle_frame(latents, velocity, [0, 2], 0.25)
    expected = latents[[0, 2], :, 2] - 0.25 * velocity[[0, 2], :, 2].float()
    assert clean.shape == (2, 4, 2, 2) and torch.allclose(clean, expected)
    assert torch.allclose(
        clean_middle_frame(latents, velocity, [0, 1], 0.5), latents[:2, :, 2] - 0.5 * velocity[:2, :, 2].float()
    )


def test_flow_schedulers_give_their_sigmas_and_others_none():
    from diffusers import DDIMScheduler, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    unipc = UniPCMultistepScheduler.from_pretrained(TINY_WAN_DIR, subfolder="scheduler")
    unipc.set_timesteps(4)
    sigmas = flow_sigmas(unipc)
    assert sigmas is not None and len(sigmas) == 5 and sigmas[0] > sigmas[-2] > 0
    euler = FlowMatchEulerDiscreteScheduler()
    euler.set_timesteps(4)
    assert flow_sigmas(euler) is not None
    ddim = DDIMScheduler()
    ddim.set_timesteps(4)
    assert flow_sigmas(ddim) is None


def test_device_previews_on_a_cpu_project_and_hand_over_at_once():
    rgb_map = LatentRgbMap(weights=[[0.0, 0.0]] * 3, bias=[255.0, 0.0, 0.0], rmse=0.0, fingerprint="f")
    got: list[PreviewImage] = []
    arrived = threading.Event()
    target = PreviewTarget(64, 36, 0, lambda image: (got.append(image), arrived.set()))
    previews = DevicePreviews("cpu", PreviewEncoder(), rgb_map)
    assert target.due(2, 5)
    previews.latents(torch.zeros(1, 2, 9, 16), [target], 2, 5)
    assert arrived.wait(10)
    image = Image.open(io.BytesIO(got[0].data)).convert("RGB")
    assert image.size == (64, 36)
    pixel = image.getpixel((30, 18))
    assert isinstance(pixel, tuple) and pixel[0] > 230 and pixel[1] < 30


def test_previews_is_the_engines_own_key_never_the_pipelines():
    extra = EngineExtraParams.of_request({"previews": False, "max_sequence_length": 64})
    assert extra.previews is False
    assert extra.pipeline_params() == {"max_sequence_length": 64}
    assert EngineExtraParams.of_request({}).previews is True


# --- jobs of an in-process engine ----------------------------------------------------------------------------


def run_job(manager: JobManager, width: int, height: int, steps: int = 6, previews: bool = True, **more):
    params = GenerationParams(
        prompt="a red circle moving left on a white background",
        width=width,
        height=height,
        num_frames=9,
        num_inference_steps=steps,
        guidance_scale=more.pop("guidance_scale", 1.0),
        seed=more.pop("seed", 1),
        extra=more,
    )
    job = manager.new_job(params, fps=16)
    job.previews_wanted = previews
    manager.submit(job)
    assert job.done.wait(120)
    assert job.status == "completed", job.error
    return job


@pytest.fixture(scope="module")
def engines():
    """The small model and the tiny Wan, each behind a JobManager with previews at every step, and the small
    model behind one with previews off."""
    out = Path(tempfile.mkdtemp(prefix="previews-"))
    small = VideoGenerator("assets/omni-small-t2v", device="cpu", threads=1)
    small.load()
    wan = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    wan.load()
    managers = {
        "small": JobManager(small, out / "a", "small", EngineMetrics("a"), previews=PreviewSettings(True, 0.0)),
        "wan": JobManager(wan, out / "b", "wan", EngineMetrics("b"), previews=PreviewSettings(True, 0.0)),
        "off": JobManager(small, out / "c", "off", EngineMetrics("c"), previews=PreviewSettings(False)),
    }
    for manager in managers.values():
        manager.start()
    yield managers
    for manager in managers.values():
        manager.shutdown()


def decoded(image: PreviewImage) -> Image.Image:
    assert image.media_type == "image/webp"
    return Image.open(io.BytesIO(image.data))


def test_the_small_model_previews_its_key_frames_in_the_jobs_aspect(engines):
    job = run_job(engines["small"], 320, 180)
    assert job.preview is not None and job.preview.step == 6 and job.preview.total_steps == 6
    image = decoded(job.preview)
    assert image.size == (192, 108)
    # Its key frames: a white background around a red circle, not noise.
    rgb = np.asarray(image.convert("RGB")).astype(int)
    assert np.median(rgb.reshape(-1, 3), axis=0).min() > 200
    assert ((rgb[..., 0] > 150) & (rgb[..., 1] < 100)).sum() > 20


def test_the_tiny_wan_previews_through_the_batched_loop_and_its_committed_map(engines):
    manager = engines["wan"]
    assert manager.generator.batched_loop and manager.generator.previews is not None
    rgb_map = manager.generator.previews.rgb_map
    assert rgb_map is not None and "proxy" in rgb_map.note
    job = run_job(manager, 240, 400, guidance_scale=5.0)
    assert job.preview is not None and job.preview.step == 6
    assert decoded(job.preview).size == (115, 192)


def test_the_tiny_wan_previews_through_its_plain_call_too(engines):
    # A pipeline argument beyond the engine's own sends the request through the pipeline's own call.
    manager = engines["wan"]
    job = run_job(manager, 128, 72, guidance_scale=5.0, max_sequence_length=16)
    assert manager.generator.batch_key(job.params) is None  # no batch: the plain call
    assert job.preview is not None and job.preview.step == 6
    assert decoded(job.preview).size == (128, 72)


def test_no_previews_where_the_request_or_the_server_turned_them_off(engines):
    assert run_job(engines["small"], 320, 180, previews=False).preview is None
    assert run_job(engines["off"], 320, 180).preview is None


def test_each_job_of_a_batch_gets_its_own_previews(engines):
    manager = engines["wan"]
    manager.max_batch, manager.batch_wait_s = 3, 0.5
    manager.generator.set_max_batch(3)
    try:
        jobs = []
        for index, wanted in enumerate([True, True, False]):
            params = GenerationParams(
                prompt=f"batch {index}",
                width=128,
                height=80,
                num_frames=9,
                num_inference_steps=4,
                guidance_scale=5.0,
                seed=index,
            )
            job = manager.new_job(params, fps=16)
            job.previews_wanted = wanted
            jobs.append(job)
        for job in jobs:
            manager.submit(job)
        for job in jobs:
            assert job.done.wait(120) and job.status == "completed"
    finally:
        manager.max_batch, manager.batch_wait_s = 1, 0.0
        manager.generator.set_max_batch(1)
    assert [job.batch_size for job in jobs] == [3, 3, 3]
    first, second, off = (job.preview for job in jobs)
    assert first is not None and second is not None and off is None
    assert first.step == second.step == 4
    assert first.data != second.data  # their own seeds: their own images


def test_with_guidance_split_across_two_ranks_rank_0_makes_the_previews():
    parallel = ParallelSettings(2, 1, start_timeout_s=60.0, collective_timeout_s=60.0)
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1, parallel=parallel)
    generator.load()
    try:
        assert generator.previews is not None and generator.rank is not None and generator.rank.is_leader
        got: list[PreviewImage] = []
        target = PreviewTarget(128, 72, 0.0, got.append)
        params = GenerationParams("a red circle", 128, 80, 9, 3, 5.0, seed=4)
        generator.generate_batch([BatchItem(params, preview=target)], lambda _i, result: None)
        assert [image.step for image in got] == [1, 2, 3]  # every step at interval 0, made once, by rank 0
        assert decoded(got[-1]).size == (128, 72)
    finally:
        generator.close()
