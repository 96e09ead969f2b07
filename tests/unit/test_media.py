"""mp4 writing: a video written in pieces is the same file content as one written whole; bad pieces are refused
and an aborted file is removed."""

from __future__ import annotations

import av
import numpy as np
import pytest

from studio.media import Mp4Writer, VideoError, check_mp4, encode_mp4, probe_mp4, read_frames

FASTSTART = {"movflags": "faststart"}


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


def test_a_downloaded_file_is_checked_by_its_packets_and_its_first_frame(tmp_path):
    path = tmp_path / "sent.mp4"
    encode_mp4(moving_square(17, 32, 48), 16, path, threads=1)
    info = check_mp4(path)
    assert info.num_frames == probe_mp4(path).num_frames == 17
    assert (info.width, info.height, info.codec) == (48, 32, "h264")

    # The same stream with its index first (as a server writing "faststart" sends it): cut short, its index still
    # reads, and the packets missing are what refuse it, never counted as a shorter video.
    indexed_first = tmp_path / "faststart.mp4"
    with av.open(str(path)) as source, av.open(str(indexed_first), "w", format="mp4", options=FASTSTART) as copy:
        stream = copy.add_stream_from_template(source.streams.video[0])
        for packet in source.demux(source.streams.video[0]):
            if packet.size:
                packet.stream = stream
                copy.mux(packet)
    assert check_mp4(indexed_first).num_frames == 17
    for original in (path, indexed_first):
        whole = original.read_bytes()
        for kept in (0.3, 0.6, 0.95):
            cut = tmp_path / f"cut-{kept}-{original.name}"
            cut.write_bytes(whole[: int(len(whole) * kept)])
            with pytest.raises(VideoError):
                check_mp4(cut)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(range(256)) * 40)
    with pytest.raises(VideoError):
        check_mp4(garbage)
