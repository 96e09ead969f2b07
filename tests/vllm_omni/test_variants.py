"""`omni-studio bench --variants` against the installed vLLM-Omni: each flag a variant sets is looked up in the
server's own `vllm serve --omni --help=all`, and one it lacks is refused before any server starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from studio.backend.bench.variants import Variant, VariantError, check_variants
from tests.conftest import WAN_DIR
from tests.vllm_omni.conftest import VLLM, vllm_settings

pytestmark = pytest.mark.timeout(300)


def test_a_variant_with_a_flag_vllm_omni_lacks_is_refused_before_any_server_starts(tmp_path):
    variants = tmp_path / "variants.toml"
    variants.write_text('eager = "--enforce-eager"\nfast = "--no-such-flag-3f2 1"\n')
    out = tmp_path / "report"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "bench",
            "--engine",
            "vllm-omni",
            "--vllm",
            VLLM,
            "--model",
            str(WAN_DIR),
            "--layouts",
            "1x1",
            "--variants",
            str(variants),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "variant 'fast': the installed server has no flag --no-such-flag-3f2" in result.stderr
    assert "serve --omni --help=all" in result.stderr
    assert not (out / "logs").exists()  # no server was started


def test_the_flags_vllm_omni_has_pass():
    settings = vllm_settings()
    check_variants(
        settings,
        [
            Variant("base", ""),
            Variant("teacache", "--cache-backend tea_cache"),
            Variant("fp8", "--quantization fp8"),
            Variant("short", "-q fp8"),
            Variant("eager", "--enforce-eager"),
            Variant("underscores", "--enforce_eager"),  # vLLM reads _ as -
        ],
    )
    with pytest.raises(VariantError, match="variant 'typo': the installed server has no flag --cache-backen"):
        check_variants(settings, [Variant("typo", "--cache-backen tea_cache")])
