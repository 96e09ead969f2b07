"""A clip is resized to the requested size a few frames at a time, into the encoder: a long clip at 720p never
needs memory of its own length in float32 (a 200-frame clip did take the engine from 0.6 GB to 6.8 GB), and what
comes out is what resizing the whole clip at once gave."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from studio.engine import resize as resize_module
from studio.engine.encoding import encode_pieces
from studio.engine.frames import finished_output, resize_frames
from studio.engine.generation_types import GenerationParams
from studio.media import encode_mp4, read_frames

ROOT = Path(__file__).resolve().parents[2]


def whole_clip_resize(frames: np.ndarray, width: int, height: int) -> np.ndarray:
    """Every frame interpolated in one call: the reference the chunks must match."""
    tensor = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    resized = torch.nn.functional.interpolate(tensor, size=(height, width), mode="bilinear", antialias=True)
    return resized.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def clip(frames: int, width: int = 80, height: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (frames, height, width, 3), dtype=np.uint8)


def params(width: int, height: int, frames: int) -> GenerationParams:
    return GenerationParams("x", width, height, frames, 1, 1.0, 0)


@pytest.mark.parametrize(("width", "height"), [(448, 256), (256, 448), (40, 24), (1280, 720)])
def test_chunks_give_what_the_whole_clip_gave(width: int, height: int) -> None:
    frames = clip(11)
    expected = whole_clip_resize(frames, width, height)
    assert np.array_equal(resize_frames(frames, width, height), expected)
    output = finished_output(frames, params(width, height, 11), "cpu", 1.0, 0.5, 0.5)
    pieces = list(output.chunks())
    assert all(len(piece) <= resize_module.RESIZE_CHUNK for piece in pieces)
    assert np.array_equal(np.concatenate(pieces), expected) and np.array_equal(output.frames, expected)
    assert output.native_size == (80, 48) and output.size == (width, height)


def test_interpolation_never_takes_more_than_a_chunk_of_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    interpolate = torch.nn.functional.interpolate

    def counting(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        seen.append(tensor.shape[0])
        return interpolate(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "interpolate", counting)
    resize_frames(clip(201), 160, 96)
    assert sum(seen) == 201 and max(seen) <= resize_module.RESIZE_CHUNK


def test_a_finished_output_at_the_model_s_own_size_is_handed_on_as_made() -> None:
    frames = clip(5)
    output = finished_output(frames, params(80, 48, 5), "cpu", 1.0, 0.5, 0.5)
    assert output.frames is frames and [piece is frames for piece in output.chunks()] == [True]


def test_the_pieces_encode_the_video_the_whole_clip_encoded(tmp_path: Path) -> None:
    frames = clip(9, seed=3)
    output = finished_output(frames, params(160, 96, 9), "cpu", 1.0, 0.5, 0.5)
    info = encode_pieces(output.chunks(), 8, tmp_path / "pieces.mp4", threads=1)
    assert (info.num_frames, info.width, info.height) == (9, 160, 96)
    encode_mp4(whole_clip_resize(frames, 160, 96), 8, tmp_path / "whole.mp4", threads=1)
    assert np.array_equal(read_frames(tmp_path / "pieces.mp4"), read_frames(tmp_path / "whole.mp4"))


# In a fresh interpreter: the high-water mark of its memory while a 720p clip of many frames goes from the model's
# native size into an encoder, above where it stood after a warm-up of the same steps on a few frames.
PEAK_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import numpy as np, torch
    torch.set_num_threads(1)
    from studio.engine.frames import finished_output
    from studio.engine.generation_types import GenerationParams

    def run(frames):
        made = np.full((frames, 48, 80, 3), 7, dtype=np.uint8)
        output = finished_output(made, GenerationParams("x", 1280, 720, frames, 1, 1.0, 0), "cpu", 1.0, 0.5, 0.5)
        written = 0
        for piece in output.chunks():  # what the encoder reads
            written += len(piece)
        assert written == frames

    run(4)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run(int(sys.argv[1]))
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    """
)


def test_a_long_720p_clip_is_resized_within_a_few_frames_of_memory() -> None:
    frames = 61  # the whole clip in float32 is 0.67 GB; at once, interpolating it took three times that
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(frames)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    grew = int(done.stdout.strip().splitlines()[-1])
    float_frame = 1280 * 720 * 3 * 4
    assert grew < 16 * float_frame, f"the resize's peak grew by {grew / 2**20:.0f} MB for {frames} frames"
