"""Property: any form the engine receives is either valid generation parameters or a clear 400."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from studio.engine.serving import ApiError, EngineState, parse_video_form

STATE = EngineState(
    manager=None,
    guard=None,
    model_name="tiny-wan",
    model_root="assets/tiny-wan",
    api_key=None,
    started_at=0.0,
    default_steps=35,
    default_guidance=6.0,
    sync_timeout_s=600.0,
)
FIELDS = [
    "prompt",
    "size",
    "width",
    "height",
    "num_frames",
    "fps",
    "seconds",
    "num_inference_steps",
    "guidance_scale",
    "flow_shift",
    "seed",
    "generate_sound",
    "sound_duration",
    "extra_params",
    "model",
    "negative_prompt",
    "guidance_scale_2",
    "true_cfg_scale",
    "boundary_ratio",
    "file_id",
]
numberish = st.one_of(
    st.integers(-(10**25), 10**25).map(str),
    st.floats(allow_nan=True).map(str),
    st.sampled_from(["", "abc", "1e400", "-0", "08", "640x", "64x64", "{}", "[1]", "true"]),
)
value = st.one_of(st.text(max_size=60), numberish)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), value, max_size=10))
def test_form_is_parsed_or_rejected_with_400(form):
    try:
        parsed = parse_video_form(form, STATE)
    except ApiError as error:
        assert error.status == 400 and error.message
        return
    params = parsed.params
    assert params.prompt.strip()
    assert 16 <= params.width <= 4096 and 16 <= params.height <= 4096
    assert params.num_frames >= 1 and (params.num_frames - 1) % 4 == 0
    assert 1 <= params.num_inference_steps <= 200
    assert 0 <= params.guidance_scale <= 20
    assert 0 <= params.seed < 2**63
    assert isinstance(params.extra, dict) and isinstance(parsed.guardrails, bool)


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=200).filter(lambda t: t.strip() and "\x00" not in t),
    st.sampled_from(["320x192", "64x64", "1280x720"]),
    st.integers(1, 300),
)
def test_a_valid_form_always_parses(prompt, size, frames):
    parsed = parse_video_form({"prompt": prompt, "size": size, "num_frames": str(frames)}, STATE)
    assert parsed.params.prompt == prompt and f"{parsed.params.width}x{parsed.params.height}" == size
    assert parsed.request.requested_frames == frames and parsed.params.num_frames >= frames
