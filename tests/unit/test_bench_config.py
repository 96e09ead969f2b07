"""The bench's form, shared by `omni-studio bench` and the page: what it accepts and how it says no."""

import pytest

from studio.backend.bench.config import DEFAULT_PROMPTS, BenchConfigError, parse_bench_config


def test_the_form_takes_lists_or_comma_separated_text():
    config = parse_bench_config(
        {
            "requests": "8",
            "concurrencies": "1, 4,16",
            "tiers": ["256p", "480p"],
            "guardrails": "on,off,on",
            "prompts": "a red circle\n\n two blue squares \n",
            "frames": 33,
            "request_rate": 0,
            "slo_s": "",
        }
    )
    assert config.requests == 8 and config.concurrencies == [1, 4, 16] and config.tiers == ["256p", "480p"]
    assert config.guardrails == [True, False] and config.prompts == ["a red circle", "two blue squares"]
    assert config.frames == 33 and config.request_rate is None and config.slo_s is None
    assert parse_bench_config({"guardrails": [False]}).guardrails == [False]


def test_defaults():
    config = parse_bench_config({"prompts": ""})
    assert (config.requests, config.concurrencies, config.tiers, config.aspect) == (16, [1, 4], ["256p"], "16:9")
    assert config.guardrails == [True] and config.warmup == 1 and config.prompts == DEFAULT_PROMPTS
    assert config.layouts == [] and config.variants == {}
    assert parse_bench_config({"layouts": "", "variants": ""}).layouts == []


def test_layouts_and_variants_from_the_forms_text():
    config = parse_bench_config({"layouts": "1x4, 2x2", "variants": 'base = ""\nfp8 = "--quantization fp8"'})
    assert [str(layout) for layout in config.layouts] == ["1x4", "2x2"]
    assert config.variants == {"base": "", "fp8": "--quantization fp8"}
    # The report keeps layouts as written.
    assert config.model_dump(mode="json")["layouts"] == ["1x4", "2x2"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"concurrencies": "x"}, "concurrency takes whole numbers from 1 to 256 separated by commas, got 'x'"),
        ({"concurrencies": "1,257"}, "concurrency takes whole numbers from 1 to 256"),
        ({"concurrencies": ""}, "concurrency takes whole numbers"),
        ({"tiers": "999p"}, "unknown tier '999p'; choose from 256p, 480p, 720p"),
        ({"tiers": []}, "pick at least one tier"),
        ({"guardrails": "maybe"}, "guardrails takes on, off or on,off, got 'maybe'"),
        ({"frames": 1000, "tiers": "256p,720p"}, "frames must be between 5 and 400 for 256p, got 1000"),
        ({"frames": 300, "tiers": "256p,720p"}, "frames must be between 5 and 200 for 720p, got 300"),
        ({"requests": 0}, "requests must be from 1 to 1000, got 0"),
        ({"requests": 1001}, "requests must be from 1 to 1000, got 1001"),
        ({"warmup": -1}, "warmup must be at least 0, got -1"),
        ({"steps": 500}, "steps must be from 1 to 200, got 500"),
        ({"seed": 2**63}, "seed must be from 0 to 9223372036854775807, got 9223372036854775808"),
        ({"request_rate": -2}, "request rate must be more than 0, got"),
        ({"aspect": "2:1"}, "aspect must be"),
        ({"concurrency": "1"}, "unknown bench setting 'concurrency'"),
        ({"layouts": "2by2"}, "layouts take REPLICASxWIDTH separated by commas, e.g. 1x4,2x2,4x1; got '2by2'"),
        ({"layouts": "1x1,1x1"}, "layout 1x1 is listed twice"),
        ({"variants": "fp8 --quantization fp8"}, 'variants take name = "serve args" lines (TOML) or a JSON object'),
        ({"variants": {"a b": ""}}, "variant name 'a b'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(values, message):
    with pytest.raises(BenchConfigError) as failure:
        parse_bench_config(values)
    assert message in str(failure.value) and "\n" not in str(failure.value)
    assert isinstance(failure.value, ValueError)
