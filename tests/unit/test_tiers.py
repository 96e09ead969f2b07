import pytest

from studio import tiers


@pytest.mark.parametrize(
    ("tier", "aspect", "size"),
    [
        ("256p", "16:9", (320, 192)),
        ("480p", "9:16", (480, 832)),
        ("720p", "4:3", (1104, 832)),
        ("256p", "1:1", (256, 256)),
    ],
)
def test_size_table(tier, aspect, size):
    assert tiers.size_for(tier, aspect) == size


def test_every_size_is_a_multiple_of_16():
    for by_aspect in tiers.SIZES.values():
        for width, height in by_aspect.values():
            assert width % 16 == 0 and height % 16 == 0


@pytest.mark.parametrize(
    ("requested", "rounded"), [(1, 1), (5, 5), (6, 9), (8, 9), (9, 9), (30, 33), (189, 189), (190, 193)]
)
def test_round_frames_up_to_4k_plus_1(requested, rounded):
    assert tiers.round_frames(requested) == rounded


def test_normalize_frames_limits_per_tier():
    assert tiers.normalize_frames(400, "256p") == 397  # rounding up would pass the ceiling
    assert tiers.normalize_frames(300, "480p") == 297
    with pytest.raises(tiers.TierError, match="between 5 and 200"):
        tiers.normalize_frames(201, "720p")
    with pytest.raises(tiers.TierError):
        tiers.normalize_frames(4, "256p")


def test_shape_defaults_and_errors():
    shape = tiers.shape_for("480p", "16:9")
    assert (shape.size, shape.num_frames, shape.fps) == ("832x480", 189, 24)
    with pytest.raises(tiers.TierError, match="fps"):
        tiers.shape_for("256p", "16:9", 33, fps=25)
    with pytest.raises(tiers.TierError, match="aspect"):
        tiers.shape_for("256p", "2:1")
    assert tiers.tier_of_size(1280, 720) == "720p"
    assert tiers.tier_of_size(64, 64) is None
