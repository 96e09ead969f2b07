"""An aspect per prompt line: `9:16 | a prompt` makes that line's requests at 9:16, the others at the run's aspect;
the prompt sent is the line without its prefix; an aspect outside the tiers' or a prefix with nothing after it is
refused in words; History lists the aspects a run made."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from studio import tiers
from studio.backend.runs.spec import RunSpec
from studio.ui.tables import run_aspects

pytestmark = pytest.mark.unit


def test_a_prompt_line_takes_its_own_aspect_and_the_others_the_runs() -> None:
    spec = RunSpec(prompts=["9:16 | a dancer on a rooftop", "a city at dusk", " 1:1|a bowl of fruit"], copies=2)
    requests = spec.build_requests()
    sizes = [(r.width, r.height) for r in requests]
    assert sizes == [tiers.size_for("256p", a) for a in ("9:16", "9:16", "16:9", "16:9", "1:1", "1:1")]
    assert [r.prompt for r in requests[::2]] == ["a dancer on a rooftop", "a city at dusk", "a bowl of fruit"]
    assert spec.aspects() == ["9:16", "16:9", "1:1"]
    assert run_aspects(spec.model_dump(mode="json")) == "9:16, 16:9, 1:1"
    assert run_aspects(RunSpec(prompts=["a cat"], aspect="4:3").model_dump(mode="json")) == "4:3"


def test_a_ratio_inside_a_prompt_is_words_not_a_prefix() -> None:
    (request,) = RunSpec(prompts=["a screen at 16:9 | showing news"]).build_requests()
    assert request.prompt == "a screen at 16:9 | showing news" and (request.width, request.height) == (320, 192)


@pytest.mark.parametrize(
    ("line", "words"), [("2:1 | a wide sky", "unknown aspect '2:1'"), ("9:16 |  ", "write a prompt after '9:16' |")]
)
def test_a_wrong_prefix_is_refused_in_words(line: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        RunSpec(prompts=["a cat", line])
    assert words in str(refused.value)
