"""The Bench form's example of server variants speaks the running engine's flags: the embedded engine's own levers
where it runs (its parser takes each), vLLM-Omni's serve flags otherwise."""

from __future__ import annotations

import shlex

from studio.backend.bench.variants import parse_variants
from studio.config import StudioSettings
from studio.engine.__main__ import build_parser, engine_settings
from studio.ui.bench_tab import variants_example


def test_the_embedded_engines_example_is_made_of_flags_it_takes():
    variants = parse_variants(variants_example(StudioSettings(engine="embedded")))
    assert len(variants) >= 2 and "" in variants.values()  # a baseline, and at least one lever
    for args in variants.values():
        engine_settings(build_parser().parse_args(shlex.split(args)))  # refused flags exit here


def test_vllm_omnis_example_names_its_serve_flags():
    example = variants_example(StudioSettings(engine="vllm-omni"))
    assert "--cache-backend" in example and "--step-cache" not in example
