"""The Server view's vLLM-Omni levers against the installed vLLM-Omni: each lever's flag is in its own
`vllm serve --omni --help=all` (a missing one is named), and the argv the studio launches with every lever set is
read by the server's own argument parser into the settings vLLM-Omni has for them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from studio.backend.bench.variants import server_flags
from studio.backend.servers.launchers import LEVER_FLAGS, levers_missing, vllm_omni_launch
from studio.ui.server_tab import lever_visibility
from tests.vllm_omni.conftest import VLLM, vllm_settings

pytestmark = pytest.mark.timeout(300)

# The server's own parser, built as `vllm serve --omni` builds it, reading an argv without starting anything.
PARSE = """
import json, sys
from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
from vllm_omni.entrypoints.cli import serve
from vllm_omni.utils.tracking_parser import TrackingArgumentParser

cli_env_setup()
parser = TrackingArgumentParser()
subparsers = parser.add_subparsers(dest="subparser")
for command in serve.cmd_init():
    command.subparser_init(subparsers)
args = parser.parse_args(sys.argv[1:])
plain = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None)))}
print("PARSED " + json.dumps(plain))
"""


def test_every_levers_flag_is_in_the_installed_vllm_omni():
    flags = server_flags(vllm_settings())
    missing = levers_missing(flags)
    shown, note = lever_visibility(flags)
    assert missing == [], note  # the note names each lever the installed vLLM-Omni lacks, and its flag
    assert all(shown.values()) and set(shown) == set(LEVER_FLAGS)


def test_the_levers_argv_is_read_by_the_servers_own_parser():
    settings = vllm_settings(
        cfg_parallel_size=2,
        ulysses_degree=2,
        ring_degree=2,
        cache_backend="tea_cache",
        quantization="fp8",
        diffusion_attention_backend="FLASH_ATTN",
        enforce_eager=True,
        vae_tiling=True,
        init_timeout_s=1800,
    )
    argv = vllm_omni_launch(settings, port=8000).argv
    python = Path(VLLM).parent / "python"
    done = subprocess.run(
        [str(python), "-c", PARSE, *argv[1:]], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, (done.stderr or done.stdout)[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("PARSED "))
    parsed = json.loads(line.removeprefix("PARSED "))
    assert parsed["omni"] is True and parsed["model_tag"] == settings.model
    assert (parsed["tensor_parallel_size"], parsed["cfg_parallel_size"]) == (1, 2)
    assert (parsed["ulysses_degree"], parsed["ring_degree"]) == (2, 2)
    assert parsed["cache_backend"] == "tea_cache" and parsed["quantization"] == "fp8"
    assert parsed["diffusion_attention_backend"] == "FLASH_ATTN"
    assert parsed["enforce_eager"] is True and parsed["vae_use_tiling"] is True
    assert parsed["init_timeout"] == 1800 and parsed["no_guardrails"] is True  # vllm_settings turns guardrails off
