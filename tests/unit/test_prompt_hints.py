"""The default model's grammar is said, and a prompt it cannot draw gets a hint naming what the grammar lacks."""

from __future__ import annotations

from studio import grammar
from studio.backend.controller import StudioController
from studio.config import TINY_WAN_DIR, StudioSettings


def test_a_prompt_outside_the_grammar_is_told_what_it_lacks():
    assert grammar.what_is_missing("a red circle moving left on a white background") is None
    assert grammar.what_is_missing("two blue squares moving up on black") is None
    white = grammar.what_is_missing("a white circle moving left")
    assert white is not None and white.startswith("white is a background color, not a shape's")
    cat = grammar.what_is_missing("a cat jumping")
    assert cat is not None and "name one shape (circle, square, triangle, diamond)" in cat and "moves" in cat
    assert all(word in grammar.summary() for word in (*grammar.COLORS, *grammar.SHAPES, *grammar.BACKGROUNDS))


def test_the_studio_hints_only_for_the_small_model(tmp_path):
    small = StudioController(StudioSettings(_env_file=None, outputs_dir=tmp_path / "a"))
    other = StudioController(StudioSettings(_env_file=None, outputs_dir=tmp_path / "b", model=str(TINY_WAN_DIR)))
    try:
        assert small.serves_small_model and not other.serves_small_model
        hints = small.prompt_hints(["a red circle moving left", "white circle"])
        assert hints == [
            "prompt 2 ('white circle') is outside the default model's grammar: "
            + str(grammar.what_is_missing("white circle"))
        ]
        assert other.prompt_hints(["white circle"]) == []
    finally:
        small.close()
        other.close()
