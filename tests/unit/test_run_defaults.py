"""Each default written once: the page, `generate` and `bench` resolve a run through the same RunSpec.resolved, for
every engine kind, so that for the same inputs they send the same request; and the engine kinds' records are what
the rest of the studio reads."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from studio import tiers
from studio.backend.bench.runner import cell_spec
from studio.backend.controller import StudioController
from studio.backend.engine_kinds import (
    COSMOS_FRAMEWORK,
    EMBEDDED,
    KINDS,
    MANAGED_ENGINES,
    REMOTE,
    URL_ENGINES,
    VLLM_OMNI,
    engine_kind,
    kind_of_job,
)
from studio.backend.runs.spec import RunSpec
from studio.cli import build_parser
from studio.cli.bench import BenchCommand, _config
from studio.cli.generate import _checked_spec
from studio.config import StudioSettings
from studio.protocol import MAX_SEED, RANDOM_SEED_BOUND, VideoRequest
from studio.settings_flags import model_values
from studio.ui import handlers

PROMPT = "a red circle moving left on a white background"
# What a request is, its prompt and its seed's value apart.
SAME = ("size", "num_frames", "fps", "num_inference_steps", "guidance_scale", "model", "extra_params", "seed")


def settings_of(engine: str, **values: object) -> StudioSettings:
    return StudioSettings(_env_file=None, engine=engine, **values)


def page_request(settings: StudioSettings, tmp_path, **form: object) -> VideoRequest:
    """What the page's run sends: the Generate form through handlers.build_spec, as the controller runs it."""
    controller = StudioController(settings.model_copy(update={"outputs_dir": tmp_path / "page"}))
    try:
        spec = handlers.build_spec({"prompts": PROMPT, "tier": "256p", "aspect": "16:9", **form}, controller)
        return controller.checked_spec(spec).build_requests()[0]  # what new_run resolves and builds
    finally:
        controller.close()


def cli_args(command: str, settings: StudioSettings, *flags: str) -> argparse.Namespace:
    engine = ["--engine", settings.engine]
    return build_parser().parse_args([command, *([PROMPT] if command == "generate" else []), *engine, *flags])


def generate_request(settings: StudioSettings, *flags: str) -> VideoRequest:
    """What `omni-studio generate PROMPT --tier 256p --aspect 16:9` sends."""
    spec = _checked_spec(cli_args("generate", settings, "--tier", "256p", "--aspect", "16:9", *flags), settings)
    assert isinstance(spec, RunSpec), spec
    return spec.build_requests()[0]


def bench_request(settings: StudioSettings) -> VideoRequest:
    """What `omni-studio bench --concurrency 1 --requests 1 --tier 256p` sends."""
    args = cli_args("bench", settings, "--out", "report", "--concurrency", "1", "--requests", "1", "--tier", "256p")
    config = _config(args, BenchCommand(**model_values(args, BenchCommand)))
    return cell_spec(config, "256p", config.guardrails[0], settings, [PROMPT], 1).build_requests()[0]


def fields(request: VideoRequest) -> dict[str, object]:
    values = request.model_dump()
    values["seed"] = 0 <= request.seed < RANDOM_SEED_BOUND  # a seed the studio drew, not one left to the server
    return {name: values[name] for name in SAME}


@pytest.mark.parametrize("engine", sorted(KINDS))
def test_the_page_generate_and_bench_resolve_the_same_request_on_every_engine(engine, tmp_path):
    settings = settings_of(engine)
    page, cli, bench = page_request(settings, tmp_path), generate_request(settings), bench_request(settings)
    assert fields(page) == fields(cli) == fields(bench)
    defaults = engine_kind(engine).defaults_for("256p")
    assert (page.size, page.num_frames, page.fps) == ("320x192", defaults.frames, tiers.DEFAULT_FPS)
    assert (page.num_inference_steps, page.guidance_scale) == (tiers.DEFAULT_STEPS, tiers.DEFAULT_GUIDANCE)


def test_the_embedded_engine_makes_short_clips_by_default_on_the_page_and_in_the_cli(tmp_path):
    settings = settings_of("embedded")
    page, cli, bench = page_request(settings, tmp_path), generate_request(settings), bench_request(settings)
    assert page.num_frames == cli.num_frames == bench.num_frames == EMBEDDED.defaults.frames == 33
    assert fields(page) == fields(cli) == fields(bench)
    # The other kinds: Cosmos 3's length.
    assert {kind.name: kind.defaults_for("480p").frames for kind in (VLLM_OMNI, REMOTE, COSMOS_FRAMEWORK)} == {
        "vllm-omni": 189,
        "remote": 189,
        "cosmos-framework": 189,
    }


def test_the_settings_defaults_win_everywhere(tmp_path):
    settings = settings_of("remote", default_frames=17, default_steps=9, served_model_name="Cosmos3-Nano")
    page, cli, bench = page_request(settings, tmp_path), generate_request(settings), bench_request(settings)
    assert fields(page) == fields(cli) == fields(bench)
    assert (page.num_frames, page.num_inference_steps, page.model) == (17, 9, "Cosmos3-Nano")


def test_what_the_user_gives_wins_over_the_defaults(tmp_path):
    settings = settings_of("embedded")
    page = page_request(settings, tmp_path, frames=9, fps="16", steps=4, guidance=3.5)
    cli = generate_request(settings, "--frames", "9", "--fps", "16", "--steps", "4", "--guidance", "3.5")
    assert (page.num_frames, page.fps, page.num_inference_steps, page.guidance_scale) == (9, 16, 4, 3.5)
    assert fields(page) == fields(cli)


def test_a_resolved_run_resolves_to_itself_and_an_unresolved_one_leaves_the_server_its_defaults():
    spec = RunSpec(prompts=["x"], tier="480p", steps=12)
    resolved = spec.resolved(EMBEDDED)
    assert (resolved.frames, resolved.fps, resolved.steps, resolved.guidance) == (33, 24, 12, 6.0)
    assert resolved.resolved(REMOTE) == resolved  # filled fields stay as they are
    request = spec.build_requests()[0]  # a Run made without an engine (the tests' own): as before
    assert (request.num_frames, request.fps, request.guidance_scale) == (189, 24, None)


def test_one_seed_bound_everywhere():
    assert RunSpec(prompts=["x"], seed=MAX_SEED).build_requests()[0].seed == MAX_SEED
    with pytest.raises(ValidationError, match=f"less than or equal to {MAX_SEED}"):
        RunSpec(prompts=["x"], seed=MAX_SEED + 1)
    wrapped = RunSpec(prompts=["x"], seed=MAX_SEED, seed_policy="increment", copies=2).build_requests()
    assert [request.seed for request in wrapped] == [MAX_SEED, 0]
    drawn = RunSpec(prompts=["x"], copies=8).build_requests()
    assert all(0 <= request.seed < RANDOM_SEED_BOUND for request in drawn)


def test_a_run_is_checked_on_one_request(tmp_path):
    controller = StudioController(settings_of("embedded", outputs_dir=tmp_path / "out"))
    try:
        many = RunSpec(prompts=["x"] * 50, copies=20, negative_prompt="n" * 25_000)
        with pytest.raises(ValidationError, match="at most 20000 characters"):
            controller.checked_spec(many)
        with pytest.raises(tiers.TierError, match="frames must be between 5 and 200 for 720p"):
            controller.checked_spec(RunSpec(prompts=["x"], tier="720p", frames=500))
    finally:
        controller.close()


def test_the_records_are_the_studio_wide_facts():
    assert MANAGED_ENGINES == ("embedded", "vllm-omni")
    assert URL_ENGINES == ("remote", "cosmos-framework")
    assert engine_kind(settings_of("remote")) is REMOTE and engine_kind("cosmos-framework") is COSMOS_FRAMEWORK
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        engine_kind("tgi")
    assert kind_of_job("cosmos-framework-sync-abc") is COSMOS_FRAMEWORK and kind_of_job("video_gen_1") is None
    assert [kind.name for kind in KINDS.values() if kind.capabilities.previews] == ["embedded"]
    assert not COSMOS_FRAMEWORK.capabilities.queue_and_inference and EMBEDDED.capabilities.queue_and_inference
    assert (VLLM_OMNI.launcher is not None, REMOTE.launcher, REMOTE.replica) == (True, None, None)
    wide = settings_of("vllm-omni", tensor_parallel_size=2, cfg_parallel_size=2, ring_degree=2)
    assert (VLLM_OMNI.width(wide), VLLM_OMNI.replica.label(wide)) == (8, "TP2xCFG2xRING2")
    # The embedded engine's width is its own parallelism: it has no tensor parallel, nor ring.
    embedded = settings_of("embedded", tensor_parallel_size=4, ulysses_degree=2, ring_degree=2)
    assert (EMBEDDED.width(embedded), EMBEDDED.replica.words(embedded)) == (2, "cfg parallel 1 x ulysses 2")
