"""Server variants for the bench: parsed from TOML or JSON, and each flag looked up in the installed server's own
help before any server starts (the embedded engine's `python -m studio.engine --help` here; vLLM-Omni's in
tests/vllm_omni/test_variants.py)."""

import json

import pytest

from studio.backend.bench.variants import (
    Variant,
    VariantError,
    check_variants,
    flags_in,
    help_flags,
    load_variants,
    parse_variants,
    serve_args,
    variants_of,
)
from studio.config import StudioSettings

# The shape of an argparse help, vLLM's included: options listed with every name, help beside or below.
HELP = """usage: vllm serve [model_tag] [options]

options:
  -h, --help            show this help message and exit
  --enforce-eager, --no-enforce-eager
                        Whether to always use eager-mode PyTorch.
  --quantization QUANTIZATION, -q QUANTIZATION
                        Method used to quantize the weights; see also
                        --not-a-flag-in-prose
  --cache-backend CACHE_BACKEND
  --ulysses-mode {strict,advanced_uaa}
  --compilation-config COMPILATION_CONFIG, -cc COMPILATION_CONFIG
"""


def embedded(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


def test_variants_parse_from_toml_json_or_a_mapping():
    toml = 'base = ""\nteacache = "--cache-backend tea_cache"\nfp8 = "--quantization fp8"'
    assert parse_variants(toml) == {"base": "", "teacache": "--cache-backend tea_cache", "fp8": "--quantization fp8"}
    assert parse_variants('{"eager": "--enforce-eager"}') == {"eager": "--enforce-eager"}
    assert parse_variants({"two": ["--max-batch", "1"]}) == {"two": "--max-batch 1"}
    assert parse_variants("") == {} and parse_variants(None) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a b", 'variants take name = "serve args" lines (TOML) or a JSON object'),
        ('{"x": ', "or a JSON object"),
        ("[1, 2]", "or a JSON object"),
        ({"has space": ""}, "variant name 'has space': letters, digits"),
        ({"n": 3}, "variant 'n': its serve args are one string"),
        ({"q": "--a 'open"}, "variant 'q': cannot split"),
        ({"nl": "--a\n--b"}, "variant 'nl': its serve args are one line"),
    ],
)
def test_a_bad_variant_is_refused_by_name(value, message):
    with pytest.raises(VariantError) as refused:
        parse_variants(value)
    assert message in str(refused.value)


def test_a_variants_file_is_toml_or_json_by_its_name(tmp_path):
    (tmp_path / "v.toml").write_text('base = ""\neager = "--enforce-eager"\n')
    (tmp_path / "v.json").write_text(json.dumps({"fp8": "--quantization fp8"}))
    assert load_variants(tmp_path / "v.toml") == {"base": "", "eager": "--enforce-eager"}
    assert load_variants(tmp_path / "v.json") == {"fp8": "--quantization fp8"}
    (tmp_path / "bad.json").write_text("base = 1")
    with pytest.raises(VariantError, match=r"bad\.json: not JSON"):
        load_variants(tmp_path / "bad.json")


def test_no_variant_is_the_settings_as_they_are_and_a_variant_adds_to_them():
    assert variants_of({}) == [Variant("base", "")]
    assert variants_of({"a": "--x"}) == [Variant("a", "--x")]
    settings = embedded(extra_serve_args="--max-kept-jobs 5")
    assert serve_args(settings, Variant("b", "--max-batch 1")) == "--max-kept-jobs 5 --max-batch 1"
    assert serve_args(embedded(), Variant("base", "")) == ""


def test_flags_are_read_from_a_help_and_from_serve_args():
    flags = help_flags(HELP)
    assert {"--enforce-eager", "--no-enforce-eager", "--quantization", "-q", "--cache-backend", "-cc"} <= flags
    assert "--not-a-flag-in-prose" not in flags and "QUANTIZATION" not in flags
    assert flags_in(["--a", "1", "--b=2", "-q", "fp8", "-1", "--c", "-0.5"]) == ["--a", "--b", "-q", "--c"]


def test_the_embedded_engines_own_help_decides():
    check_variants(embedded(), [Variant("base", ""), Variant("batch1", "--max-batch 1 --no-cuda-graphs")])
    with pytest.raises(VariantError) as refused:
        check_variants(embedded(), [Variant("ok", "--max-batch 1"), Variant("teacache", "--cache-backend tea_cache")])
    message = str(refused.value)
    assert message.startswith("variant 'teacache': the installed server has no flag --cache-backend")
    assert "python -m studio.engine --help" in message


def test_a_variant_may_not_set_what_the_layout_or_the_bench_sets():
    with pytest.raises(VariantError, match="variant 'p' sets --port, which each replica gets its own"):
        check_variants(embedded(), [Variant("p", "--port 9000")])
    with pytest.raises(VariantError, match="variant 'tp' sets --tensor-parallel-size, which the layout's width"):
        check_variants(embedded(engine="vllm-omni"), [Variant("tp", "--tensor-parallel-size 2")])


def test_exposure_widening_flags_need_the_settings_consent():
    with pytest.raises(VariantError, match="variant 'open': extra serve args set --host"):
        check_variants(embedded(), [Variant("open", "--host 0.0.0.0")])
    check_variants(embedded(allow_risky_serve_args=True), [Variant("open", "--host 0.0.0.0")])
