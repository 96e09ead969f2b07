"""The small model's parts: the grammar's ground truth, the clip generator, the reader, the pipeline's round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import studio.smallmodel  # noqa: F401  registers the pipeline class with diffusers
from studio.engine.frames import resize_frames
from studio.engine.generation_types import GenerationCancelled, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.grammar import (
    BACKGROUNDS,
    COLORS,
    DEFAULT_BACKGROUND,
    MOTIONS,
    SHAPES,
    TRANSLATIONS,
    Scene,
    all_scenes,
    format_prompt,
    heldout_scenes,
    parse_prompt,
    train_scenes,
    vocabulary,
    words_of,
)
from studio.smallmodel import OmniFieldDenoiser, OmniSmallT2VPipeline, OmniTextEncoder, build_pipeline
from studio.smallmodel.analysis import label_components, measure_shape, read_video, shape_of
from studio.smallmodel.clips import (
    EXTENT,
    PLACEMENT,
    grid_points,
    render_clips,
    render_points,
    render_scenes,
    sample_layouts,
)
from studio.smallmodel.pipeline import native_size_for

TINY = {"width": 16, "depth": 1, "cond_dim": 16, "frequencies": 2}
TINY_TEXT = {"dim": 16}


# --- grammar -------------------------------------------------------------------------------------------------


def test_grammar_is_as_large_as_the_issue_asks():
    assert len(COLORS) >= 8 and len(SHAPES) >= 3 and len(BACKGROUNDS) >= 3
    assert {"left", "right", "up", "down", "still"} < set(MOTIONS) and len(MOTIONS) >= 6
    assert not set(COLORS) & set(BACKGROUNDS)


def test_every_phrasing_parses_back_to_its_scene():
    for scene in all_scenes():
        for variant in range(4):
            for style in range(3):
                assert parse_prompt(format_prompt(scene, variant, style)) == scene


def test_the_issue_examples_parse():
    assert parse_prompt("a red circle moving left on a white background") == Scene(1, "red", "circle", "left", "white")
    assert parse_prompt("two blue squares moving up on black") == Scene(2, "blue", "square", "up", "black")
    assert parse_prompt("a red circle moving left") == Scene(1, "red", "circle", "left", DEFAULT_BACKGROUND)
    assert parse_prompt("a cat on the beach") is None


def test_heldout_split_is_disjoint_and_covers_every_value():
    train, held = set(train_scenes()), set(heldout_scenes())
    assert not train & held and train | held == set(all_scenes())
    assert len(held) >= 100
    for attribute in ("count", "color", "shape", "motion", "background"):
        assert {getattr(s, attribute) for s in train} == {getattr(s, attribute) for s in all_scenes()}
    assert heldout_scenes() == heldout_scenes()  # fixed, not random per run


def test_vocabulary_covers_the_grammar():
    vocab = set(vocabulary())
    for scene in all_scenes()[::7]:
        for variant in range(4):
            assert set(words_of(format_prompt(scene, variant, 1))) <= vocab


# --- clip generator ------------------------------------------------------------------------------------------


def _scene_sample(n: int = 120) -> list[Scene]:
    scenes = all_scenes()
    return [scenes[(i * 97) % len(scenes)] for i in range(n)]


@pytest.mark.parametrize(("width", "height"), [(80, 48), (48, 80), (48, 48), (64, 48), (40, 24), (24, 40)])
@pytest.mark.parametrize("variety", ["full", "canonical"])
def test_layouts_keep_objects_inside_and_apart_and_move_as_told(width, height, variety):
    scenes = _scene_sample()
    layouts = sample_layouts(scenes, width, height, torch.Generator().manual_seed(1), variety)
    centers, sizes = layouts.centers(9), layouts.sizes(9)
    for b, scene in enumerate(scenes):
        reach = EXTENT * sizes[b].max().item()
        for k in range(scene.count):
            xs, ys = centers[b, :, k, 0], centers[b, :, k, 1]
            assert xs.min() - reach >= 0 and xs.max() + reach <= width
            assert ys.min() - reach >= 0 and ys.max() + reach <= height
        if scene.count == 2:
            gap = (centers[b, :, 0] - centers[b, :, 1]).norm(dim=-1).min().item()
            assert gap >= 2 * reach
        move = centers[b, -1, 0] - centers[b, 0, 0]
        if scene.motion in TRANSLATIONS:
            sx, sy = TRANSLATIONS[scene.motion]
            along = move[0] * sx + move[1] * sy
            assert along >= 0.3 * (width if sx else height) and abs(move[0] * sy + move[1] * sx) < 1e-4
        else:
            assert move.abs().max() < 1e-4
        grow = sizes[b, -1] / sizes[b, 0]
        expected = {"growing": 3.0, "shrinking": 1 / 3}.get(scene.motion, 1.0)
        assert math.isclose(float(grow), expected, rel_tol=1e-4)


def test_rendered_pixels_are_the_scene_colors():
    scenes = _scene_sample(60)
    video, layouts = render_scenes(scenes, 80, 48, 5, seed=2)
    assert video.shape == (60, 5, 48, 80, 3) and video.min() >= 0 and video.max() <= 1
    centers = layouts.centers(5)
    for b, scene in enumerate(scenes):
        color = torch.tensor(COLORS[scene.color]) / 255
        background = torch.tensor(BACKGROUNDS[scene.background]) / 255
        for t in range(5):
            for k in range(scene.count):
                x, y = centers[b, t, k].long().tolist()
                assert torch.allclose(video[b, t, y, x], color, atol=1e-5)
        # most of the frame is background
        share = (video[b, 0] - background).abs().amax(-1).lt(1e-5).float().mean()
        assert share > 0.6


def test_rendering_is_seeded():
    scenes = _scene_sample(8)
    a, _ = render_scenes(scenes, 48, 48, 3, seed=5)
    b, _ = render_scenes(scenes, 48, 48, 3, seed=5)
    c, _ = render_scenes(scenes, 48, 48, 3, seed=6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    layouts = sample_layouts(scenes, 48, 48, torch.Generator().manual_seed(5))
    assert torch.equal(render_clips(layouts, 48, 48, 3), a)


def test_points_between_pixels_and_frames_are_drawn_where_the_motion_is():
    scenes = [Scene(1, "red", "square", "right", "white"), Scene(2, "blue", "circle", "down", "black")]
    layouts = sample_layouts(scenes, 80, 48, torch.Generator().manual_seed(0), "canonical")
    grid = render_clips(layouts, 80, 48, 5)
    points = grid_points(80, 48, 5, "cpu").expand(2, -1, -1)
    assert torch.equal(render_points(layouts, points).view(grid.shape), grid)
    # Half way between two frames the object's center has the object's color (not a blend of two frames).
    phase = torch.full((2, 1), 0.375)
    center = layouts.centers_at(phase)[:, :, 0]
    drawn = render_points(layouts, torch.cat([center, phase[..., None]], dim=-1))[:, 0]
    assert torch.allclose(drawn, layouts.color, atol=1e-6)


def test_a_canonical_scene_is_its_placement_shifted():
    scenes = _scene_sample(40)
    zero = sample_layouts(scenes, 80, 48, None, "canonical", torch.zeros(40, 2))
    shift = torch.tensor([[PLACEMENT, -PLACEMENT]]).expand(40, -1)
    moved = sample_layouts(scenes, 80, 48, None, "canonical", shift)
    assert torch.allclose(moved.start - zero.start, (shift * 48)[:, None].expand(-1, 2, -1), atol=1e-4)
    again = sample_layouts(scenes, 80, 48, torch.Generator().manual_seed(9), "canonical", torch.zeros(40, 2))
    assert torch.equal(again.start, zero.start)  # nothing else is random


# --- the reader (the benchmark's eyes) ----------------------------------------------------------------------


def test_components_are_labelled_apart():
    mask = torch.zeros(1, 6, 8, dtype=torch.bool)
    mask[0, 1:3, 1:3] = True
    mask[0, 4:6, 5:8] = True
    labels = label_components(mask)
    assert len(torch.unique(labels)) == 3 and labels[0, 1, 1] != labels[0, 4, 5]


@pytest.mark.parametrize(("size", "native"), [((448, 256), (80, 48)), ((256, 256), (48, 48)), ((256, 448), (48, 80))])
def test_reader_reads_ground_truth_clips_exactly(size, native):
    scenes = _scene_sample(28)
    video, _ = render_scenes(scenes, *native, 17, seed=4, variety="canonical")
    for b, scene in enumerate(scenes):
        frames = resize_frames((video[b].numpy() * 255 + 0.5).astype(np.uint8), *size)
        reading = read_video(frames)
        assert (reading.color, reading.motion, reading.count, reading.shape) == (
            scene.color,
            scene.motion,
            scene.count,
            scene.shape,
        ), scene
        assert reading.pieces == [scene.count] * 17, scene


def test_shape_measures_tell_the_four_shapes_apart():
    size = 64
    y, x = torch.meshgrid(torch.arange(size) + 0.5 - size / 2, torch.arange(size) + 0.5 - size / 2, indexing="ij")
    triangle = (y <= 20) & (y >= -20 + (2 * x.abs()))  # apex up, base down
    shapes = {
        "square": (x.abs() <= 20) & (y.abs() <= 20),
        "circle": x**2 + y**2 <= 400,
        "diamond": x.abs() + y.abs() <= 20,
        "triangle": triangle,
    }
    for name, mask in shapes.items():
        fill, low = measure_shape(mask.float())
        assert shape_of(fill, low) == name, (name, fill, low)
    assert math.isclose(measure_shape(shapes["circle"].float())[0], math.pi / 4, abs_tol=0.02)


def test_reader_counts_a_speck_as_a_piece():
    frames = np.full((5, 96, 160, 3), 245, dtype=np.uint8)
    frames[:, 30:60, 30:60] = (220, 30, 30)
    frames[2, 80:84, 140:144] = (220, 30, 30)
    reading = read_video(frames)
    assert reading.pieces == [1, 1, 2, 1, 1] and reading.count == 1 and reading.shape == "square"


def test_reader_finds_nothing_in_a_blank_video():
    reading = read_video(np.full((9, 48, 80, 3), 200, dtype=np.uint8))
    assert reading.color is None and reading.motion is None and reading.count == 0


# --- pipeline ------------------------------------------------------------------------------------------------


def test_native_sizes_follow_the_aspect():
    assert native_size_for(448, 256, 24, 40) == (40, 24)
    assert native_size_for(1280, 720, 24, 40) == (40, 24)
    assert native_size_for(256, 256, 24, 40) == (24, 24)
    assert native_size_for(320, 240, 24, 40) == (32, 24)
    assert native_size_for(720, 1280, 24, 40) == (24, 40)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    torch.manual_seed(0)
    pipe = build_pipeline(vocabulary(), denoiser=TINY, text=TINY_TEXT)
    path = tmp_path_factory.mktemp("tiny-small-t2v")
    pipe.save_pretrained(path)
    return path


def test_text_encoder_is_a_bag_of_words():
    text = OmniTextEncoder(vocab=vocabulary(), **TINY_TEXT)
    states, mask = text.encode(["a red circle moving left", "left moving circle red a", "a zebra"])
    assert mask.tolist()[2] == [True, True, True, True, False, False, False]
    pooled = OmniFieldDenoiser.pooled(states, mask)
    assert torch.allclose(pooled[0], pooled[1], atol=1e-6)  # the same words in any order mean the same
    assert text.known_words("a zebra") == (["a"], ["zebra"])


def test_field_draws_any_size_and_predicts_sampled_points_alike():
    torch.manual_seed(0)
    text = OmniTextEncoder(vocab=vocabulary(), **TINY_TEXT)
    model = OmniFieldDenoiser(text_dim=16, **{k: v for k, v in TINY.items()})
    states, mask = text.encode(["a red circle moving left", "two blue squares growing on black"])
    sigma = torch.tensor([0.3, 0.9])
    placement = torch.tensor([[0.05, -0.02], [0.0, 0.07]])
    for height, width in ((24, 40), (40, 24), (24, 24), (7, 13)):
        x = torch.randn(2, 3, 9, height, width)
        full = model(x, sigma, states, mask, placement=placement)
        assert full.shape == x.shape and full.abs().max() <= 1.0
        chosen = torch.randint(0, 9 * height * width, (2, 50))
        coords = model.coordinates(9, height, width, "cpu", torch.float32).view(1, -1, 3).expand(2, -1, -1)
        points = torch.gather(coords, 1, chosen[..., None].expand(-1, -1, 3))
        some = model(x, sigma, states, mask, points=points, placement=placement)
        flat = full.permute(0, 2, 3, 4, 1).reshape(2, -1, 3)
        assert torch.allclose(some, torch.gather(flat, 1, chosen[..., None].expand(-1, -1, 3)), atol=1e-5)
        # Frames drawn between the key frames: every other one of 17 is a key frame, drawn as on the key grid.
        between = model(x, sigma, states, mask, placement=placement, grid=(17, height, width))
        assert torch.allclose(between[:, :, ::2], full, atol=1e-5)
        assert model(x, sigma, states, mask, grid=(5, 2 * height, 3 * width)).shape == (2, 3, 5, 2 * height, 3 * width)
    assert model.predict_motion(states, mask).shape == (2, 3)
    moved = model(x, sigma, states, mask, placement=placement.flip(0))
    assert not torch.allclose(moved, full)  # the placement moves what the field draws


def test_save_and_load_round_trip(tiny_dir):
    from diffusers import DiffusionPipeline

    loaded = DiffusionPipeline.from_pretrained(tiny_dir)
    assert isinstance(loaded, OmniSmallT2VPipeline)
    again = OmniSmallT2VPipeline.from_pretrained(tiny_dir)
    for name in ("text_encoder", "transformer"):
        a, b = getattr(loaded, name).state_dict(), getattr(again, name).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    kwargs = {
        "prompt": "a red circle moving left",
        "num_frames": 5,
        "num_inference_steps": 2,
        "width": 448,
        "height": 256,
    }
    one = loaded(**kwargs, generator=torch.Generator().manual_seed(3))
    two = again(**kwargs, generator=torch.Generator().manual_seed(3))
    assert one.frames.shape == (1, 5, 48, 80, 3) and one.native_size == (80, 48)
    assert np.array_equal(one.frames, two.frames)
    assert one.frames.min() >= 0.0 and one.frames.max() <= 1.0
    three = loaded(**kwargs, generator=torch.Generator().manual_seed(4))
    assert not np.array_equal(one.frames, three.frames)  # the seed matters


def test_pipeline_honours_frames_sizes_and_output_types(tiny_dir):
    pipe = OmniSmallT2VPipeline.from_pretrained(tiny_dir)
    pipe.set_progress_bar_config(disable=True)
    for frames in (1, 9, 33):
        out = pipe(
            "two blue squares moving up on black", num_frames=frames, num_inference_steps=1, width=256, height=448
        )
        assert out.frames.shape == (1, frames, 80, 48, 3)
    pt = pipe("x", num_frames=5, num_inference_steps=1, output_type="pt").frames
    assert isinstance(pt, torch.Tensor) and pt.shape == (1, 5, 3, 48, 80)
    pil = pipe("x", num_frames=5, num_inference_steps=1, output_type="pil").frames
    assert len(pil) == 1 and len(pil[0]) == 5 and pil[0][0].size == (80, 48)
    with pytest.raises(ValueError, match="num_frames"):
        pipe("x", num_frames=0)


def test_engine_runner_loads_it_reports_steps_resizes_and_cancels(tiny_dir):
    runner = VideoGenerator(str(tiny_dir), device="cpu")
    runner.load()
    assert isinstance(runner.pipe, OmniSmallT2VPipeline)
    params = GenerationParams(
        prompt="a green triangle growing on gray",
        width=448,
        height=256,
        num_frames=9,
        num_inference_steps=4,
        guidance_scale=6.0,
        seed=1,
        flow_shift=5.0,
    )
    steps: list[tuple[int, int]] = []
    output = runner.generate(params, on_step=lambda done, total: steps.append((done, total)))
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert output.frames.dtype == np.uint8 and output.frames.shape == (9, 256, 448, 3)
    assert output.native_size == (80, 48)
    with pytest.raises(GenerationCancelled):
        runner.generate(params, should_stop=lambda: len(steps) >= 6, on_step=lambda done, total: steps.append(done))
    assert len(steps) == 6  # stopped after the second step of the second run
