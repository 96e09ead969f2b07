"""mp4 writing: a video written in pieces is the same file content as one written whole; bad pieces are refused
and an aborted file is removed."""

from __future__ import annotations

import numpy as np
import pytest

from studio.media import Mp4Writer, VideoError, encode_mp4, probe_mp4, read_frames


def moving_square(frames: int, height: int, width: int) -> np.ndarray:
    video = np.full((frames, height, width, 3), 30, dtype=np.uint8)
    for t in range(frames):
        video[t, 4:12, 2 + t : 10 + t] = (220, 40, 40)
    return video


def test_pieces_make_the_same_video_as_one_call(tmp_path):
    video = moving_square(13, 32, 48)
    whole = encode_mp4(video, 16, tmp_path / "whole.mp4", threads=1)
    writer = Mp4Writer(tmp_path / "pieces.mp4", 16, width=48, height=32, threads=1)
    for piece in (video[:1], video[1:5], video[5:9], video[9:]):  # as Wan's VAE hands them over: 1, then 4s
        writer.write(piece)
    pieces = writer.close()
    assert writer.frames_written == 13
    assert (
        (pieces.num_frames, pieces.width, pieces.height)
        == (whole.num_frames, whole.width, whole.height)
        == (
            13,
            48,
            32,
        )
    )
    # The encoder is not bit-for-bit repeatable from run to run, so both files are held to the source frames:
    # a piece lost, doubled or out of order would put the pieces' file far from them.
    source = video.astype(int)
    whole_error = np.abs(read_frames(tmp_path / "whole.mp4").astype(int) - source).mean()
    pieces_error = np.abs(read_frames(tmp_path / "pieces.mp4").astype(int) - source).mean()
    assert whole_error < 2 and pieces_error < whole_error + 0.5


def test_odd_sides_are_padded_to_even(tmp_path):
    writer = Mp4Writer(tmp_path / "odd.mp4", 8, width=33, height=17, threads=1)
    writer.write(moving_square(3, 17, 33))
    info = writer.close()
    assert (info.width, info.height, info.num_frames) == (34, 18, 3)


def test_a_piece_of_another_size_is_refused_and_abort_removes_the_file(tmp_path):
    path = tmp_path / "bad.mp4"
    writer = Mp4Writer(path, 8, width=32, height=32, threads=1)
    writer.write(moving_square(2, 32, 32))
    with pytest.raises(VideoError, match="the video is 32x32"):
        writer.write(moving_square(2, 16, 32))
    with pytest.raises(VideoError, match="uint8"):
        writer.write(moving_square(2, 32, 32).astype(np.float32))
    writer.abort()
    assert not path.exists()


def test_the_index_check_counts_the_frames_without_decoding(tmp_path):
    writer = Mp4Writer(tmp_path / "indexed.mp4", 16, width=48, height=32, threads=1)
    writer.write(moving_square(9, 32, 48))
    info = writer.close(decode=False)
    assert info.num_frames == 9 and set(writer.close_seconds) == {"flush", "check"}
    assert probe_mp4(tmp_path / "indexed.mp4").num_frames == 9  # the full decode agrees
